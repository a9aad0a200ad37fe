"""A Gluon prefill over a paged KV cache, outside the wheel (bench_ceiling_paged.py builds
and times it): the wheel's Gluon SDPA consumers (kernels/_lib/gluon_attention.py) fed by a
producer warp that loads each block of 128 keys as 128 / PAGE TMA copies of one page.
Causal from the bottom right per request, ragged requests packed along the tokens
(FlashAttention's varlen layout), pages in (pages, PAGE, heads_kv, head_dim), one table
row per request. What issue 28's paged prefill can reach; no window, softcap, appended
entries or log-sum-exp yet."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from ntops_aot.kernels._lib.gluon_attention import (
    attend_rows_0,
    attend_rows_1,
    load_queries,
    shared_ring,
)

ROWS = gl.constexpr(128)


@gluon.jit
def load_pages(
    q_rows, k_pages, v_pages, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks,
    table_row, pages_max, num_pages,
):  # fmt: skip
    """The producer: the queries, then each block's keys and values page by page."""
    STAGES: gl.constexpr = k.shape[0]
    load_queries(q_rows, q, q_ready)
    for j in range(blocks):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        load_block(k_pages, k, k_ready, k_free, stage, phase, j, table_row, pages_max, num_pages)
        load_block(v_pages, v, v_ready, v_free, stage, phase, j, table_row, pages_max, num_pages)


@gluon.jit
def load_block(pages, buffers, ready, free, stage, phase, j, table_row, pages_max, num_pages):
    """Block j of keys (or values) into `stage`, once both groups freed it: a copy a page."""
    PAGE: gl.constexpr = pages.block_type.shape[0]
    PIECES: gl.constexpr = buffers.shape[1] // PAGE
    mbarrier.wait(free.index(stage), phase ^ 1)
    mbarrier.expect(ready.index(stage), PIECES * pages.block_type.nbytes)
    for piece in gl.static_range(PIECES):
        number = page_number(table_row, j * PIECES + piece, pages_max, num_pages)
        into = buffers.index(stage).slice(piece * PAGE, PAGE)
        tma.async_load(pages, [number * PAGE, 0], ready.index(stage), into)


@gluon.jit
def page_number(table_row, page, pages_max, num_pages):
    """Entry `page` of a table row, both clamped into the table and the cache."""
    number = gl.load(table_row + gl.minimum(page, pages_max - 1))
    return gl.minimum(gl.maximum(number, 0), num_pages - 1)


@gluon.jit
def request_of(cu_q, block, batch):
    """The request whose 128-row blocks hold `block` (request b's from cu_q[b] // 128 + b)."""
    low = block * 0
    high = low + batch
    while high - low > 1:
        middle = (low + high) // 2
        first = gl.load(cu_q + middle) // ROWS + middle
        low = gl.where(first <= block, middle, low)
        high = gl.where(first <= block, high, middle)
    return low


@gluon.jit
def paged_prefill(
    Q, KC, VC, Out, cu_q, k_lens, table, scale, batch, total_q, heads_q, heads_kv, num_pages,
    pages_max, PAGE: gl.constexpr, D: gl.constexpr,
):  # fmt: skip
    """softmax(q k^T * scale) v for 128 queries of one request and query head; the grid is
    (total_q // 128 + batch) * heads_q, a unit's heads together, the last units first."""
    BLOCK_N: gl.constexpr = 128
    STAGES: gl.constexpr = 2
    DTYPE: gl.constexpr = Q.dtype.element_ty
    group = heads_q // heads_kv
    units = total_q // ROWS + batch
    pid = gl.program_id(0)
    unit = units - 1 - pid // heads_q
    head = pid % heads_q
    b = request_of(cu_q, unit, batch)
    q_start = gl.load(cu_q + b)
    q_len = gl.load(cu_q + b + 1) - q_start
    first = (unit - (q_start // ROWS + b)) * ROWS
    if first < q_len:
        seq_kv = gl.load(k_lens + b)
        offset = seq_kv - q_len
        kv_head = head // group
        seen = gl.minimum(seq_kv, gl.minimum(first + ROWS, q_len) + offset)
        blocks = gl.cdiv(gl.maximum(seen, 0), BLOCK_N)
        unmasked = gl.maximum(gl.minimum(seq_kv, first + offset + 1), 0) // BLOCK_N
        rows_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, D], DTYPE)
        keys_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], DTYPE)
        page_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([PAGE, D], DTYPE)
        row = heads_q * D
        at = (q_start + first).to(gl.int64) * row + head * D
        q_rows = tma.make_tensor_descriptor(
            Q + at, [q_len - first, D], [row, 1], [64, D], rows_layout
        )
        o_rows = tma.make_tensor_descriptor(
            Out + at, [q_len - first, D], [row, 1], [64, D], rows_layout
        )
        kv_row = heads_kv * D
        cache_rows = [num_pages * PAGE, D]
        k_pages = tma.make_tensor_descriptor(
            KC + kv_head * D, cache_rows, [kv_row, 1], [PAGE, D], page_layout
        )
        v_pages = tma.make_tensor_descriptor(
            VC + kv_head * D, cache_rows, [kv_row, 1], [PAGE, D], page_layout
        )
        q, k, v, q_ready, k_ready, v_ready, k_free, v_free = shared_ring(
            DTYPE, rows_layout, keys_layout, BLOCK_N, D, STAGES
        )
        factor = scale * 1.4426950408889634
        table_row = table + b.to(gl.int64) * pages_max
        rows_args = (
            o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
            seq_kv, offset, factor,
        )  # fmt: skip
        load_args = (
            q_rows, k_pages, v_pages, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks,
            table_row, pages_max, num_pages,
        )  # fmt: skip
        gl.warp_specialize(
            [(attend_rows_0, rows_args), (attend_rows_1, rows_args), (load_pages, load_args)],
            [4, 1],
            [240, 24],
        )
