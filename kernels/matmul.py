"""Shared tiling of matrix products: output tiles of (block_m, block_n), each the sum
over K of (block_m, block_k) x (block_k, block_n) products; a leading batch dim when
the tensors have three."""

from ntops_aot.aot.space import FLOATS, Config, VariantSpace

# Row-major or column-major operands both get unit-stride kernels: x @ w.t() is the
# common case in inference.
UNIT_DIMS = {"input": (-1, -2), "other": (-1, -2), "mat1": (-1, -2), "mat2": (-1, -2)}
PRECISION = {"fp32_precision": ("tf32", "ieee")}
# Hopper and Blackwell datacenter parts have 227 KiB of shared memory per block; the
# others 99-163 KiB, hence shallower fp32 pipelines there.
_BIG_SHARED = ("sm_90", "sm_100")


def space(ndim, unspecialized=()):
    dims = {name: tuple(d + ndim for d in dims) for name, dims in UNIT_DIMS.items()}
    return VariantSpace(
        dtypes=FLOATS,
        ndims=(ndim,),
        switches=PRECISION,
        switch_dtypes={"fp32_precision": ("fp32",)},
        coalesce="none",
        unit_dims=dims,
        unspecialized=unspecialized,
        in_place=False,
    )


def config(variant):
    arch, dtype = variant.arch, variant.dtype
    if dtype == "fp32":
        tiles = {"block_size_m": 128, "block_size_n": 128, "block_size_k": 32}
        return Config(tiles, num_warps=8, num_stages=3 if arch in (*_BIG_SHARED, "sm_80") else 2)
    if arch in _BIG_SHARED:
        tiles = {"block_size_m": 128, "block_size_n": 256, "block_size_k": 64}
        return Config(tiles, num_warps=8, num_stages=3)
    tiles = {"block_size_m": 128, "block_size_n": 128, "block_size_k": 32}
    return Config(tiles, num_warps=4, num_stages=3)


def arrange(left, right, output, block_size_m, block_size_n, block_size_k):
    """Operands of output = left @ right, 2-D or with a leading batch dim."""
    batch = output.ndim - 2
    ones = (1,) * batch
    output_arranged = output.tile((*ones, block_size_m, block_size_n))
    output_arranged.dtype = output_arranged.dtype.squeeze(tuple(range(batch)))

    left_arranged = left.tile((*ones, block_size_m, block_size_k)).tile((*ones, 1, -1))
    left_arranged = left_arranged.expand((*(-1,) * batch, -1, output_arranged.shape[-1]))
    left_arranged.dtype = left_arranged.dtype.squeeze(tuple(range(batch + 1)))
    left_arranged.dtype.dtype = left_arranged.dtype.dtype.squeeze(tuple(range(batch)))

    right_arranged = right.tile((*ones, block_size_k, block_size_n)).tile((*ones, -1, 1))
    right_arranged = right_arranged.expand((*(-1,) * batch, output_arranged.shape[-2], -1))
    right_arranged.dtype = right_arranged.dtype.squeeze((*range(batch), batch + 1))
    right_arranged.dtype.dtype = right_arranged.dtype.dtype.squeeze(tuple(range(batch)))
    return left_arranged, right_arranged, output_arranged


def arrange_like_output(tensor, output_arranged, block_size_m, block_size_n):
    """A tensor read tile for tile with the output (addmm's input)."""
    batch = tensor.ndim - 2
    arranged = tensor.tile(((1,) * batch) + (block_size_m, block_size_n))
    arranged.dtype = arranged.dtype.squeeze(tuple(range(batch)))
    return arranged
