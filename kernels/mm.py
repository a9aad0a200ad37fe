"""mm: output = input @ other (torch.mm), accumulated in fp32.

fp32 inputs go through TF32 tensor cores unless torch's float32 matmul precision
is "highest" (switch `fp32_precision=ieee`); the switch means nothing for half types.
"""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor
from ntops_aot.aot.space import FLOATS, Config, VariantSpace

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2,),
    switches={"fp32_precision": ("tf32", "ieee")},
    switch_dtypes={"fp32_precision": ("fp32",)},
    coalesce="none",
    # Row-major or column-major operands both get unit-stride kernels: x @ w.t() is
    # the common case in inference.
    unit_dims={"input": (1, 0), "other": (1, 0)},
)


def arrangement(input, other, output, block_size_m, block_size_n, block_size_k):
    output_arranged = output.tile((block_size_m, block_size_n))

    input_arranged = input.tile((block_size_m, block_size_k)).tile((1, -1))
    input_arranged = input_arranged.expand((-1, output_arranged.shape[1]))
    input_arranged.dtype = input_arranged.dtype.squeeze(0)

    other_arranged = other.tile((block_size_k, block_size_n)).tile((-1, 1))
    other_arranged = other_arranged.expand((output_arranged.shape[0], -1))
    other_arranged.dtype = other_arranged.dtype.squeeze(1)

    return input_arranged, other_arranged, output_arranged


def application_tf32(input, other, output):
    accumulator = ntl.zeros(output.shape, dtype=ntl.float32)
    for k in range(input.shape[0]):
        accumulator += ntl.dot(input[k], other[k], input_precision="tf32")
    output = accumulator


def application_ieee(input, other, output):
    accumulator = ntl.zeros(output.shape, dtype=ntl.float32)
    for k in range(input.shape[0]):
        accumulator += ntl.dot(input[k], other[k], input_precision="ieee")
    output = accumulator


# Tiles per arch family. Hopper and Blackwell datacenter parts have 227 KiB of
# shared memory per block; the others 99-163 KiB, hence shallower fp32 pipelines.
_BIG_SHARED = ("sm_90", "sm_100")


def config(arch, dtype):
    if dtype == "fp32":
        tiles = {"block_size_m": 128, "block_size_n": 128, "block_size_k": 32}
        return Config(tiles, num_warps=8, num_stages=3 if arch in (*_BIG_SHARED, "sm_80") else 2)
    if arch in _BIG_SHARED:
        tiles = {"block_size_m": 128, "block_size_n": 256, "block_size_k": 64}
        return Config(tiles, num_warps=8, num_stages=3)
    tiles = {"block_size_m": 128, "block_size_n": 128, "block_size_k": 32}
    return Config(tiles, num_warps=4, num_stages=3)


def premake(
    ndim, dtype, fp32_precision="tf32", block_size_m=128, block_size_n=128, block_size_k=32
):
    application = {"tf32": application_tf32, "ieee": application_ieee}[fp32_precision]
    arrange = functools.partial(
        arrangement,
        block_size_m=block_size_m,
        block_size_n=block_size_n,
        block_size_k=block_size_k,
    )
    tensors = (
        Tensor(2, dtype=dtype, other=0),
        Tensor(2, dtype=dtype, other=0),
        Tensor(2, dtype=dtype),
    )
    return arrange, application, tensors
