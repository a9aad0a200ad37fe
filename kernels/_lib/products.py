"""The product library mm, bmm and addmm share: output tiles of (block_size_m,
block_size_n), each the sum over K of (block_size_m, block_size_k) x (block_size_k,
block_size_n) products, accumulated in fp32; a leading batch dim when the tensors have
three.

The arrangement gives the launch grid (one program per output tile); the tile loop
itself is `product`, a Triton function the applications call with the operands'
pointers, sizes and strides, because the speed of a matrix product depends on what a
tiling does not say: the order programs take tiles in (grouped, so the operand tiles
one wave reads stay in L2), persistent programs looping over tiles, TMA descriptors
and warp specialisation on Hopper. What each configuration chooses comes in as
constexpr tensors; which layout the operands have comes from the specialisation
(`spec`): TMA needs 16-byte aligned operands with a unit-stride dim, so only the
aligned specialisations use it, the others load through pointers. Which
configurations there are, and which one a call of each size gets, is tuning policy:
kernels/tuning/products.py.
"""

import ninetoothed
import triton
import triton.language as tl
from ninetoothed import Tensor

from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from .parts import arrive, claim, partial_results

# Kernels with unit-stride dims: the left operand row-major (activations are), the
# right one row-major or column-major: `x @ w.t()` with w in nn.Linear's (out, in)
# layout is the common case in inference. Anything else takes the generic kernel.
UNIT_DIMS = {"input": (-1,), "other": (-1, -2), "mat1": (-1,), "mat2": (-1, -2)}
PRECISION = {"fp32_precision": ("tf32", "ieee")}


def space(ndim, dims, broadcast=(), unspecialized=()):
    """A product's variant space; `dims` names each operand's dims (SPACE.dims), by
    which the launcher checks the operands' shapes and allocates the product."""
    unit_dims = {name: tuple(d + ndim for d in dims) for name, dims in UNIT_DIMS.items()}
    return VariantSpace(
        dtypes=FLOATS,
        ndims=(ndim,),
        switches=PRECISION,
        switch_dtypes={"fp32_precision": ("fp32",)},
        coalesce="none",
        unit_dims=unit_dims,
        unspecialized=unspecialized,
        dims=dims,
        broadcast=broadcast,
        # The operands (addmm's added input is read by pointer): Hopper's tiles load them
        # through TMA descriptors.
        descriptors=tuple(name for name in dims if name in UNIT_DIMS and name not in broadcast),
        in_place=False,
        workspace="workspace",
        launch_id="launch",
    )


# ---- the tiling and the premake's tensors ------------------------------------------


def arrange(left, right, output, block_size_m, block_size_n, block_size_k):
    """Operands of output = left @ right, 2-D or with a leading batch dim: the grid is
    one program per output tile (persistent configurations cap it)."""
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


def constants(
    ndim,
    dtype,
    spec,
    operands,
    fp32_precision,
    block_size_m,
    block_size_n,
    block_size_k,
    group_size_m,
    tma,
    warp_specialize,
    flatten,
    split,
):
    """The kernel's constexpr tensors, in `product`'s order after the operands. TMA
    only where the specialisation guarantees what it needs; the operands' layouts
    from their unit-stride dims (`operands` names the left and right ones' slots)."""
    left, right = operands
    aligned = spec is not None and spec.aligned and spec.width == 32
    use_tma = bool(tma) and aligned and dtype in ("fp16", "bf16", "fp8e4nv")
    # Column-major right operand: its unit stride is on the K dim (nn.Linear weights).
    right_t = spec is not None and bool(spec.unit) and spec.unit[right] == ndim - 2
    left_t = spec is not None and bool(spec.unit) and spec.unit[left] == ndim - 2
    values = (
        block_size_m,
        block_size_n,
        block_size_k,
        group_size_m,
        use_tma,
        left_t,
        right_t,
        bool(warp_specialize),
        bool(flatten),
        fp32_precision,
        bool(split),
    )
    return tuple(Tensor(0, constexpr=True, value=value) for value in values)


def whole(workspace):
    """The workspace, addressed through its pointer; tiled so that ninetoothed sees a
    tile of known size."""
    return workspace.tile((1,))


def tensors(kind, ndim, dtype, spec, fp32_precision, split=1, **config):
    """The premake tensors of mm, bmm or addmm (`kind`): the operands, the workspace
    (split configurations' partial sums: the launcher allocates it) and the launch's
    id (the launcher sets it), the configuration as constexpr tensors; and the block
    sizes the arrangement tiles by."""
    blocks = {name: config[name] for name in ("block_size_m", "block_size_n", "block_size_k")}
    choices = (
        fp32_precision,
        *blocks.values(),
        config.get("group_size_m", 8),
        config.get("tma", False),
        config.get("warp_specialize", False),
        config.get("flatten", False),
        split > 1,
    )
    if kind == "addmm":
        operands = (
            Tensor(2, dtype=dtype),
            Tensor(2, dtype=dtype, other=0),
            Tensor(2, dtype=dtype, other=0),
            Tensor(0, dtype=ninetoothed.float32),
            Tensor(0, dtype=ninetoothed.float32),
            Tensor(2, dtype=dtype),
        )
        fixed = constants(ndim, dtype, spec, (1, 2), *choices)
    else:
        operands = tuple(Tensor(ndim, dtype=dtype, other=0) for _ in range(3))
        fixed = constants(ndim, dtype, spec, (0, 1), *choices)
    workspace, launch = Tensor(1, dtype=ninetoothed.int32), Tensor(0, dtype=ninetoothed.int64)
    return (*operands, workspace, launch, *fixed), blocks


# ---- the tile loop -----------------------------------------------------------------
# The applications pass N from the output, whose unit-stride dim it is: aligned
# specialisations compile it as a multiple of 16, so tile columns past N mask whole
# vectors. Taken from a column-major right operand it is not, and the masks cost Triton
# 3.9 scalar stores and a fifth more instructions per K step (0.81-0.89x cuBLAS at 64
# rows, 0.94-0.98x with N from the output; H100, 2026-11-22).


@triton.jit
def tile_of(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M rows of tiles are walked column by column, so the
    programs of one wave share left and right operand tiles in L2."""
    per_group = GROUP_M * num_n
    first = (tile // per_group) * GROUP_M
    rows = tl.minimum(num_m - first, GROUP_M)
    return first + (tile % per_group) % rows, (tile % per_group) // rows


@triton.jit
def tma_stride(stride):
    """A TMA stride for a dim the launcher stored as 0 (size 1: never stepped over);
    TMA wants multiples of 16 bytes, and any one serves a dim of size 1."""
    return tl.where(stride == 0, 16, stride)


@triton.jit
def descriptor_of(
    x, batch, R, C, s_b, s_r, s_c,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, T: tl.constexpr, BATCHED: tl.constexpr,
):  # fmt: skip
    """A TMA descriptor of an (R, C) operand (batched: (batch, R, C)) read in
    (BLOCK_R, BLOCK_C) tiles; `T`: stored transposed (its unit stride is on R). One
    return: Triton types every return of a function alike, constexpr branches too."""
    if BATCHED:
        if T:
            made = tl.make_tensor_descriptor(
                x, [batch, C, R], [tma_stride(s_b), tma_stride(s_c), 1], [1, BLOCK_C, BLOCK_R]
            )
        else:
            made = tl.make_tensor_descriptor(
                x, [batch, R, C], [tma_stride(s_b), tma_stride(s_r), 1], [1, BLOCK_R, BLOCK_C]
            )
    elif T:
        made = tl.make_tensor_descriptor(x, [C, R], [tma_stride(s_c), 1], [BLOCK_C, BLOCK_R])
    else:
        made = tl.make_tensor_descriptor(x, [R, C], [tma_stride(s_r), 1], [BLOCK_R, BLOCK_C])
    return made


@triton.jit
def load_tile(
    descriptor, z, r, c,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, T: tl.constexpr, BATCHED: tl.constexpr,
):  # fmt: skip
    """The (BLOCK_R, BLOCK_C) tile at (r, c) of batch z through a `descriptor_of`."""
    if BATCHED:
        if T:
            tile = descriptor.load([z, c, r]).reshape(BLOCK_C, BLOCK_R).T
        else:
            tile = descriptor.load([z, r, c]).reshape(BLOCK_R, BLOCK_C)
    elif T:
        tile = descriptor.load([c, r]).T
    else:
        tile = descriptor.load([r, c])
    return tile


@triton.jit
def operands(
    a, b, a_desc, b_desc, z, m, n, k, M, N, K, sa_b, sa_m, sa_k, sb_b, sb_k, sb_n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr, BATCHED: tl.constexpr,
):  # fmt: skip
    """The (BLOCK_M, BLOCK_K) and (BLOCK_K, BLOCK_N) operand tiles of output tile
    (z, m, n) at K offset k: through TMA, or masked loads."""
    if TMA:
        left = load_tile(a_desc, z, m * BLOCK_M, k, BLOCK_M, BLOCK_K, A_T, BATCHED)
        right = load_tile(b_desc, z, k, n * BLOCK_N, BLOCK_K, BLOCK_N, B_T, BATCHED)
    else:
        rows = m * BLOCK_M + tl.arange(0, BLOCK_M)
        columns = n * BLOCK_N + tl.arange(0, BLOCK_N)
        inner = k + tl.arange(0, BLOCK_K)
        left = tl.load(
            a + z * sa_b + rows[:, None] * sa_m + inner[None, :] * sa_k,
            mask=(rows[:, None] < M) & (inner[None, :] < K),
            other=0.0,
        )
        right = tl.load(
            b + z * sb_b + inner[:, None] * sb_k + columns[None, :] * sb_n,
            mask=(inner[:, None] < K) & (columns[None, :] < N),
            other=0.0,
        )
    return left, right


@triton.jit
def accumulate(left, right, accumulator, PRECISION: tl.constexpr, BLOCK_K: tl.constexpr,
               SCALED: tl.constexpr):  # fmt: skip
    """accumulator + left @ right. SCALED (FP8 operands): each K step's products summed
    by the tensor cores and then added in fp32 (Triton's max_num_imprecise_acc), where
    Hopper's default leaves the whole sum to the FP8 tensor cores' adder, which keeps
    about 14 bits (DeepSeek-V3's report; torch._scaled_mm's use_fast_accum)."""
    if SCALED:
        summed = tl.dot(left, right, accumulator, max_num_imprecise_acc=BLOCK_K)
    else:
        summed = tl.dot(left, right, accumulator, input_precision=PRECISION)
    return summed


@triton.jit
def finish(
    accumulator, c, c_desc, z, m, n, M, N, sc_b, sc_m, sc_n,
    bias, sd_b, sd_m, sd_n, beta, alpha,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr,
    HAS_BIAS: tl.constexpr, BATCHED: tl.constexpr,
    scale_a=0, ss_m=0, scale_b=0, ss_n=0, SCALED: tl.constexpr = False,
):  # fmt: skip
    """Store output tile (z, m, n): alpha * accumulator + beta * bias (addmm), else
    the accumulator, in the output's dtype. SCALED (scaled_mm): the accumulator times
    each row's scale_a and each column's scale_b first (strides ss_m and ss_n: 0 for a
    scale per tensor)."""
    rows = m * BLOCK_M + tl.arange(0, BLOCK_M)
    columns = n * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = (rows[:, None] < M) & (columns[None, :] < N)
    if SCALED:
        by_row = tl.load(scale_a + rows * ss_m, mask=rows < M, other=0.0)
        by_column = tl.load(scale_b + columns * ss_n, mask=columns < N, other=0.0)
        accumulator = accumulator * by_row[:, None] * by_column[None, :]
    if HAS_BIAS:
        added = tl.load(
            bias + z * sd_b + rows[:, None] * sd_m + columns[None, :] * sd_n, mask=inside, other=0.0
        )
        added = tl.where(beta == 0, 0.0, beta * added.to(tl.float32))
        accumulator = alpha * accumulator + added
    result = accumulator.to(c.dtype.element_ty)
    if TMA:
        if BATCHED:
            c_desc.store([z, m * BLOCK_M, n * BLOCK_N], result.reshape(1, BLOCK_M, BLOCK_N))
        else:
            c_desc.store([m * BLOCK_M, n * BLOCK_N], result)
    else:
        tl.store(c + z * sc_b + rows[:, None] * sc_m + columns[None, :] * sc_n, result, mask=inside)


@triton.jit
def product(
    a, batch, M, K, sa_b, sa_m, sa_k,
    b, N, sb_b, sb_k, sb_n,
    c, sc_b, sc_m, sc_n,
    bias, sd_b, sd_m, sd_n, beta, alpha, workspace, launch,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr, PRECISION: tl.constexpr,
    SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, BATCHED: tl.constexpr,
    scale_a=0, ss_m=0, scale_b=0, ss_n=0, SCALED: tl.constexpr = False,
):  # fmt: skip
    """c[z] = a[z] @ b[z] (+ beta * bias[z], times alpha) for z < batch, tile by tile;
    SCALED, the products scaled by row and column first (`finish`).
    Unsplit, programs take tiles pid, pid + programs, ... (one each unless
    persistent). Split (SPLIT), the grid is tiles x parts and each program sums a
    part of K for one tile (`product_part`)."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_batch = num_m * num_n
    if TMA:
        a_desc = descriptor_of(a, batch, M, K, sa_b, sa_m, sa_k, BLOCK_M, BLOCK_K, A_T, BATCHED)
        b_desc = descriptor_of(b, batch, K, N, sb_b, sb_k, sb_n, BLOCK_K, BLOCK_N, B_T, BATCHED)
        c_desc = descriptor_of(c, batch, M, N, sc_b, sc_m, sc_n, BLOCK_M, BLOCK_N, False, BATCHED)
    else:
        a_desc, b_desc, c_desc = a, b, c
    if SPLIT:
        product_part(
            a, b, c, a_desc, b_desc, c_desc, batch, M, N, K, sa_b, sa_m, sa_k,
            sb_b, sb_k, sb_n, sc_b, sc_m, sc_n, bias, sd_b, sd_m, sd_n, beta, alpha,
            workspace, launch, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, TMA, A_T, B_T, PRECISION,
            HAS_BIAS, BATCHED, scale_a, ss_m, scale_b, ss_n, SCALED,
        )  # fmt: skip
    else:
        for tile in tl.range(
            tl.program_id(0), batch * per_batch, tl.num_programs(0), flatten=FLATTEN
        ):
            z = tile // per_batch
            m, n = tile_of(tile % per_batch, num_m, num_n, GROUP_M)
            accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for step in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=WARP_SPECIALIZE):
                left, right = operands(
                    a, b, a_desc, b_desc, z, m, n, step * BLOCK_K, M, N, K,
                    sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, BLOCK_M, BLOCK_N, BLOCK_K,
                    TMA, A_T, B_T, BATCHED,
                )  # fmt: skip
                accumulator = accumulate(left, right, accumulator, PRECISION, BLOCK_K, SCALED)
            finish(
                accumulator, c, c_desc, z, m, n, M, N, sc_b, sc_m, sc_n,
                bias, sd_b, sd_m, sd_n, beta, alpha, BLOCK_M, BLOCK_N, TMA, HAS_BIAS, BATCHED,
                scale_a, ss_m, scale_b, ss_n, SCALED,
            )  # fmt: skip


@triton.jit
def product_part(
    a, b, c, a_desc, b_desc, c_desc, batch, M, N, K, sa_b, sa_m, sa_k,
    sb_b, sb_k, sb_n, sc_b, sc_m, sc_n, bias, sd_b, sd_m, sd_n, beta, alpha, workspace, launch,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
    PRECISION: tl.constexpr, HAS_BIAS: tl.constexpr, BATCHED: tl.constexpr,
    scale_a=0, ss_m=0, scale_b=0, ss_n=0, SCALED: tl.constexpr = False,
):  # fmt: skip
    """Split K: program pid sums part pid % parts of K for tile pid // parts (the
    parts of a tile run side by side) and leaves its fp32 sum in the workspace; the
    last part to arrive (`arrive`) adds the parts up in order, so the result does not
    depend on who arrived when, and stores it. Workspace: an int64 counter per
    program, then a BLOCK_M x BLOCK_N fp32 tile per program."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_batch = num_m * num_n
    programs = tl.num_programs(0)
    parts = programs // (batch * per_batch)
    pid = tl.program_id(0)
    tile = pid // parts
    z = tile // per_batch
    m, n = tile_of(tile % per_batch, num_m, num_n, GROUP_M)
    steps = tl.cdiv(K, BLOCK_K)
    per_part = tl.cdiv(steps, parts)
    first = (pid % parts) * per_part
    counters = workspace.to(tl.pointer_type(tl.int64))
    if parts > 1:
        claim(counters + tile, launch)
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in tl.range(first, tl.minimum(first + per_part, steps)):
        left, right = operands(
            a, b, a_desc, b_desc, z, m, n, step * BLOCK_K, M, N, K,
            sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, BLOCK_M, BLOCK_N, BLOCK_K, TMA, A_T, B_T, BATCHED,
        )  # fmt: skip
        accumulator = accumulate(left, right, accumulator, PRECISION, BLOCK_K, SCALED)
    if parts > 1:
        partials = partial_results(workspace)
        within = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tl.store(partials + pid * (BLOCK_M * BLOCK_N) + within, accumulator)
        tl.debug_barrier()  # every thread's part stored before the counter says so
        if arrive(counters + tile, launch) == parts:
            accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for part in range(parts):
                slot = partials + (tile * parts + part) * (BLOCK_M * BLOCK_N) + within
                accumulator += tl.load(slot, cache_modifier=".cg")
            finish(
                accumulator, c, c_desc, z, m, n, M, N, sc_b, sc_m, sc_n,
                bias, sd_b, sd_m, sd_n, beta, alpha, BLOCK_M, BLOCK_N, TMA, HAS_BIAS, BATCHED,
                scale_a, ss_m, scale_b, ss_n, SCALED,
            )  # fmt: skip
            tl.store(counters + tile, 0)  # a graph's replay finds no count of its own
    else:
        finish(
            accumulator, c, c_desc, z, m, n, M, N, sc_b, sc_m, sc_n,
            bias, sd_b, sd_m, sd_n, beta, alpha, BLOCK_M, BLOCK_N, TMA, HAS_BIAS, BATCHED,
            scale_a, ss_m, scale_b, ss_n, SCALED,
        )  # fmt: skip


def workspace(config):
    """Split configurations: per program, a tile counter (int64: `arrive` needs no
    zeroed memory) and an fp32 tile of partial sums."""
    if config.split <= 1:
        return (0, 0)
    return (8 + 4 * config.premake["block_size_m"] * config.premake["block_size_n"], 0)
