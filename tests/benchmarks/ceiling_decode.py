"""A Gluon paged decode, outside the wheel (bench_ceiling_decode.py builds and times it):
issue 28's decode with the keys and values copied by TMA, a page (or BLOCK_N keys of a
longer page) a copy, by a producer warp into a ring of STAGES buffers, and one consumer
warp group that multiplies a GQA group's query heads (4 of a 64-row wgmma tile) by each
block. The wheel's Triton decode gathers keys by pointer (cp.async), holds 250 registers
and reached 50-59% of the H100's DRAM bandwidth at batch 8 (docs/measurements.md); this
is what copies the TMA engine makes instead can reach.

Work split as FlashInfer's plan splits it, on the host: a list of items (request, first
key, end key), parts of one request's keys one after another; a request of one part
writes its rows, the others leave each row's maximum, sum and fp32 accumulator for
`merge`. Pages in (pages, PAGE, heads_kv, head_dim), one table row per request."""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ntops_aot.kernels._lib.gluon_attention import mma_layout

ROWS = gl.constexpr(64)  # a warp group's wgmma tile


@gluon.jit
def produce(
    q_rows, k_pages, v_pages, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, lo,
    table_row, pages_max, num_pages, PAGE: gl.constexpr,
):  # fmt: skip
    STAGES: gl.constexpr = k.shape[0]
    BLOCK_N: gl.constexpr = k.shape[1]
    COPY: gl.constexpr = k_pages.block_type.shape[0]
    COPIES: gl.constexpr = BLOCK_N // COPY
    mbarrier.expect(q_ready, q_rows.block_type.nbytes)
    tma.async_load(q_rows, [0, 0], q_ready, q)
    for j in range(blocks):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        key = lo + j * BLOCK_N
        for half in gl.static_range(2):
            pages = k_pages if half == 0 else v_pages
            buffers = k if half == 0 else v
            ready = k_ready if half == 0 else v_ready
            free = k_free if half == 0 else v_free
            mbarrier.wait(free.index(stage), phase ^ 1)
            mbarrier.expect(ready.index(stage), COPIES * pages.block_type.nbytes)
            for copy in gl.static_range(COPIES):
                at = key + copy * COPY
                number = gl.load(table_row + gl.minimum(at // PAGE, pages_max - 1))
                number = gl.minimum(gl.maximum(number, 0), num_pages - 1)
                row = number * PAGE + at % PAGE
                into = buffers.index(stage).slice(copy * COPY, COPY)
                tma.async_load(pages, [row, 0], ready.index(stage), into)


@gluon.jit
def consume(
    q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, lo, hi, factor, out_rows,
    part_rows, ml_rows, group, whole, PIPELINED: gl.constexpr,
):  # fmt: skip
    """The consumer warp group: softmax(q k^T) v over keys lo..hi, block by block."""
    STAGES: gl.constexpr = k.shape[0]
    BLOCK_N: gl.constexpr = k.shape[1]
    D: gl.constexpr = k.shape[2]
    DTYPE: gl.constexpr = k.dtype
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(D)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    columns = gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
    l_i = gl.full([ROWS], 0.0, gl.float32, row_layout)
    acc = gl.zeros([ROWS, D], gl.float32, o_layout)
    zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    mbarrier.wait(q_ready, 0)
    for j in range(blocks):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(k_ready.index(stage), phase)
        token = warpgroup_mma(q, k.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(token,))
        mbarrier.arrive(k_free.index(stage))
        keys = lo + j * BLOCK_N + columns
        s = gl.where(keys[None, :] < hi, s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1) * factor)
        p = gl.exp2(s * factor - m_new[:, None])
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p = gl.convert_layout(p.to(DTYPE), p_layout)
        mbarrier.wait(v_ready.index(stage), phase)
        acc = warpgroup_mma(p, v.index(stage), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(v_free.index(stage))
    rows = gl.arange(0, ROWS, gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, D, gl.SliceLayout(0, o_layout))
    live = (rows < group)[:, None]
    cells = rows[:, None] * D + cols[None, :]
    total = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    if whole:
        out = acc / total[:, None]
        gl.store(out_rows + cells, out.to(DTYPE), mask=live)
    else:
        gl.store(part_rows + cells, acc, mask=live)
        within = gl.arange(0, ROWS, row_layout)
        gl.store(ml_rows + within * 2, m_i, mask=within < group)
        gl.store(ml_rows + within * 2 + 1, l_i, mask=within < group)


@gluon.jit
def paged_decode(
    Q, KC, VC, Out, Part, ML, items, table, scale, heads_q, heads_kv, num_pages, pages_max,
    PAGE: gl.constexpr, D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """One item (request b, keys lo..hi) of one key/value head: its GQA group's rows. The
    grid: items * heads_kv, an item's heads one after another."""
    DTYPE: gl.constexpr = Q.dtype.element_ty
    COPY: gl.constexpr = PAGE if PAGE < BLOCK_N else BLOCK_N
    pid = gl.program_id(0)
    item = pid // heads_kv
    kv_head = pid % heads_kv
    b = gl.load(items + item * 4)
    lo = gl.load(items + item * 4 + 1)
    hi = gl.load(items + item * 4 + 2)
    whole = gl.load(items + item * 4 + 3) != 0
    group = heads_q // heads_kv
    blocks = gl.cdiv(hi - lo, BLOCK_N)
    rows_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, D], DTYPE)
    keys_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], DTYPE)
    copy_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([COPY, D], DTYPE)
    first_row = b.to(gl.int64) * heads_q + kv_head * group
    q_rows = tma.make_tensor_descriptor(
        Q + first_row * D, [group, D], [D, 1], [ROWS, D], rows_layout
    )
    kv_row = heads_kv * D
    cache = [num_pages * PAGE, D]
    k_pages = tma.make_tensor_descriptor(
        KC + kv_head * D, cache, [kv_row, 1], [COPY, D], copy_layout
    )
    v_pages = tma.make_tensor_descriptor(
        VC + kv_head * D, cache, [kv_row, 1], [COPY, D], copy_layout
    )
    q = gl.allocate_shared_memory(DTYPE, [ROWS, D], rows_layout)
    k = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, D], keys_layout)
    v = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, D], keys_layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=1)
        mbarrier.init(v_free.index(i), count=1)
    factor = scale * 1.4426950408889634
    out_rows = Out + first_row * D
    part_rows = Part + pid.to(gl.int64) * group * D
    ml_rows = ML + pid.to(gl.int64) * group * 2
    table_row = table + b.to(gl.int64) * pages_max
    consume_args = (
        q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, lo, hi, factor, out_rows,
        part_rows, ml_rows, group, whole, False,
    )  # fmt: skip
    produce_args = (
        q_rows, k_pages, v_pages, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, lo,
        table_row, pages_max, num_pages, PAGE,
    )  # fmt: skip
    gl.warp_specialize([(consume, consume_args), (produce, produce_args)], [1], [24])


@triton.jit
def merge(
    Out, Part, ML, req_items, heads_q, heads_kv, D: tl.constexpr, MAX_PARTS: tl.constexpr,
):  # fmt: skip
    """Request b's parts of query head h (grid: batch * heads_q), where it has several."""
    pid = tl.program_id(0)
    b = pid // heads_q
    h = pid % heads_q
    group = heads_q // heads_kv
    first = tl.load(req_items + b)
    count = tl.load(req_items + b + 1) - first
    if count > 1:
        parts = tl.arange(0, MAX_PARTS)
        inside = parts < count
        slot = ((first + parts) * heads_kv + h // group).to(tl.int64) * group + h % group
        m = tl.load(ML + slot * 2, mask=inside, other=float("-inf"))
        l_ = tl.load(ML + slot * 2 + 1, mask=inside, other=0.0)
        top = tl.max(m, 0)
        weight = tl.where(inside, tl.exp2(m - top), 0.0)
        total = tl.sum(weight * l_, 0)
        cols = tl.arange(0, D)
        acc = tl.load(Part + slot[:, None] * D + cols[None, :], mask=inside[:, None], other=0.0)
        out = tl.sum(acc * weight[:, None], 0) / total
        tl.store(Out + (b.to(tl.int64) * heads_q + h) * D + cols, out.to(Out.dtype.element_ty))
