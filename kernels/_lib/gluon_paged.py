"""Ragged prefill over a paged KV cache on Hopper, in Gluon: paged_attention's kernel for
long requests (kernels/paged_attention.py's `plain`), where Triton's stops at 0.67-0.86x
FlashInfer and this reaches 0.96-1.15x (H100, tests/benchmarks/bench_ceiling_paged.py).

The consumers are the SDPA prefill's (gluon_attention.py's two warp groups of 64 rows,
which also leave each row's log-sum-exp); the producer warp loads each block of 128 keys
in copies of COPY keys, one TMA copy each: 16 for pages of 16 and 32, 64 for longer pages
and keys in one run (packed or dense), two variants (kernels/paged_attention.py's
prefill-gluon buckets). Copies of 4 KB from one warp keep up with the consumers; Triton's
pipeliner serialised such copies behind the MMAs. The copy's size is a constexpr: one
producer choosing between both at run time ran 0.90-0.92x FlashInfer on 8 ragged
prefills where each alone ran 0.95-0.97x (H100, one run), as the standalone kernel.

The parameters are the paged application's (packed queries (tokens, heads, head_dim),
the cache as (pages, page size, heads_kv, head_dim), the table, the lengths); the
launcher routes only what this kernel does: causal or not, no window, no softcapping, no
entries appended by the launch, pages of 16 to 256 keys (a power of two) that follow
each other in the cache, or keys in one run (aot/runtime/_flash_attn.py's `_prefill`).
Every index is clamped into the table and the cache, as the Triton kernel's.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from .gluon_attention import attend_rows_lse_0, attend_rows_lse_1, load_queries, shared_ring

ROWS = gl.constexpr(128)  # queries per program, as gluon_attention's
UNPAGED_SHIFT = gl.constexpr(30)  # log2 of a page size no sequence reaches:
UNPAGED = gl.constexpr(1 << UNPAGED_SHIFT.value)  # keys in one run


@gluon.jit
def load_block(
    rows, buffers, ready, free, stage, phase, j, table_row, start, shift, pages, cache_pages,
):  # fmt: skip
    """Block j of keys (or values) into `stage` once both consumer groups freed it, a TMA
    copy of `rows`' block of keys at a time: key `key` of the request is slot key % page
    of page key // page of its table row (pages of 2**shift keys; the entry clamped into
    the table and the cache), or row start + key for keys in one run (UNPAGED_SHIFT). A page
    holds whole copies, so a copy never crosses one."""
    SIZE: gl.constexpr = rows.block_type.shape[0]
    COPIES: gl.constexpr = buffers.shape[1] // SIZE
    paged = shift < UNPAGED_SHIFT
    mbarrier.wait(free.index(stage), phase ^ 1)
    mbarrier.expect(ready.index(stage), COPIES * rows.block_type.nbytes)
    for copy in gl.static_range(COPIES):
        key = j * (SIZE * COPIES) + copy * SIZE
        number = gl.load(table_row + gl.minimum(key >> shift, pages - 1), mask=paged, other=0)
        number = gl.minimum(gl.maximum(number, 0), cache_pages - 1)
        row = gl.where(paged, (number << shift) + (key & ((1 << shift) - 1)), start + key)
        into = buffers.index(stage).slice(copy * SIZE, SIZE)
        tma.async_load(rows, [row, 0], ready.index(stage), into)


@gluon.jit
def load_keys(
    q_rows, k_rows, v_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks,
    table_row, start, shift, pages, cache_pages,
):  # fmt: skip
    """The producer: the queries, then each block's keys and values."""
    STAGES: gl.constexpr = k.shape[0]
    load_queries(q_rows, q, q_ready)
    for j in range(blocks):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        load_block(
            k_rows, k, k_ready, k_free, stage, phase, j, table_row, start, shift, pages,
            cache_pages,
        )  # fmt: skip
        load_block(
            v_rows, v, v_ready, v_free, stage, phase, j, table_row, start, shift, pages,
            cache_pages,
        )  # fmt: skip


@gluon.jit
def query_start(cu_q, b, q_len):
    """Request b's first query: b * q_len for a uniform batch, else cu_q[b]."""
    return gl.load(cu_q + b, mask=q_len == 0, other=0) + b * q_len


@gluon.jit
def request_of(cu_q, unit, batch, q_len):
    """The request whose 128-row units hold `unit` (request b's from its first query //
    128 + b on), by binary search."""
    low = unit * 0
    high = low + batch
    while high - low > 1:
        middle = (low + high) // 2
        first = query_start(cu_q, middle, q_len) // ROWS + middle
        low = gl.where(first <= unit, middle, low)
        high = gl.where(first <= unit, high, middle)
    return low


@gluon.jit
def paged_prefill(
    output, output_stride_0, output_stride_1,
    query, query_size_0, query_size_1, query_stride_0, query_stride_1,
    key, key_size_0, key_size_1, key_size_2, key_size_3, key_stride_1, key_stride_2,
    value, value_stride_1, value_stride_2,
    cu_seqlens_q, cu_seqlens_q_size_0, k_starts, k_lens, block_table, block_table_size_0,
    block_table_size_1, block_table_stride_0,
    lse, lse_stride_0, lse_stride_1, lse_stride_2,
    scale, right, q_len, k_len, packed_k, cumulative, page_size, batch,
    block_d: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, COPY: gl.constexpr,
):  # fmt: skip
    """softmax(q k^T * scale) v of 128 queries of one request and query head (`right` 0:
    causal from the bottom right, -1: every key). The grid, (tokens // 128 + the table's
    rows + cu_seqlens_q's entries) x heads programs from sizes alone, holds at least
    (tokens // 128 + batch) x heads: a unit's heads one after another (those of a GQA
    group read the same keys), the last units first; the rest return."""
    DTYPE: gl.constexpr = query.dtype.element_ty
    heads_q = query_size_1
    heads_kv = key_size_2
    group = heads_q // heads_kv
    total_q = query_size_0
    units = total_q // ROWS + batch
    pid = gl.program_id(0)
    unit = units - 1 - pid // heads_q
    head = pid % heads_q
    b = request_of(cu_seqlens_q, gl.maximum(unit, 0), batch, q_len)
    q_first = gl.minimum(query_start(cu_seqlens_q, b, q_len), total_q)
    q_count = gl.maximum(gl.minimum(query_start(cu_seqlens_q, b + 1, q_len), total_q) - q_first, 0)
    first = (unit - (q_first // ROWS + b)) * ROWS
    if (unit >= 0) & (first < q_count):
        paged = page_size > 0
        page = gl.where(paged, page_size, UNPAGED)
        shift = page * 0 + 4  # the page's log2 (the launcher sends powers of two)
        while (1 << shift) < page:
            shift += 1
        pages = block_table_size_1
        packed = packed_k != 0
        start = gl.load(k_starts + b, mask=packed, other=0)
        # Keys in one run: packed from start[b], or a dense cache's entry b.
        capacity = gl.where(paged, pages * page_size, gl.maximum(key_size_1 - start, 0))
        start = gl.where(packed, start, b * key_size_1)
        read = k_len < 0
        counted = gl.load(k_lens + b + cumulative, mask=read, other=0)
        counted -= gl.load(k_lens + b, mask=read & (cumulative != 0), other=0)
        seq_kv = gl.minimum(gl.maximum(gl.where(read, counted, k_len), 0), capacity)
        offset = gl.where(right == 0, seq_kv - q_count, seq_kv)
        kv_head = head // group
        seen = gl.minimum(seq_kv, gl.minimum(first + ROWS, q_count) + offset)
        blocks = gl.cdiv(gl.maximum(seen, 0), BLOCK_N)
        unmasked = gl.maximum(gl.minimum(seq_kv, first + offset + 1), 0) // BLOCK_N
        rows_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, block_d], DTYPE)
        keys_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, block_d], DTYPE)
        head_dim = key_size_3
        at = q_first + first
        q_rows = tma.make_tensor_descriptor(
            query + at * query_stride_0 + head * query_stride_1, [q_count - first, head_dim],
            [query_stride_0, 1], [64, block_d], rows_layout,
        )  # fmt: skip
        o_rows = tma.make_tensor_descriptor(
            output + at * output_stride_0 + head * output_stride_1, [q_count - first, head_dim],
            [output_stride_0, 1], [64, block_d], rows_layout,
        )  # fmt: skip
        cache_rows = key_size_0 * key_size_1
        copy_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([COPY, block_d], DTYPE)
        k_rows = tma.make_tensor_descriptor(
            key + kv_head * key_stride_2, [cache_rows, head_dim], [key_stride_1, 1],
            [COPY, block_d], copy_layout,
        )  # fmt: skip
        v_rows = tma.make_tensor_descriptor(
            value + kv_head * value_stride_2, [cache_rows, head_dim], [value_stride_1, 1],
            [COPY, block_d], copy_layout,
        )  # fmt: skip
        uniform = q_len > 0
        lse_rows = lse + gl.where(uniform, b, 0) * lse_stride_0 + head * lse_stride_1
        lse_rows += (gl.where(uniform, 0, q_first) + first) * lse_stride_2
        q, k, v, q_ready, k_ready, v_ready, k_free, v_free = shared_ring(
            DTYPE, rows_layout, keys_layout, BLOCK_N, block_d, STAGES
        )
        factor = scale * 1.4426950408889634
        table_row = block_table + b * block_table_stride_0
        rows_args = (
            o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
            seq_kv, offset, factor, lse_rows, lse_stride_2, q_count - first,
        )  # fmt: skip
        load_args = (
            q_rows, k_rows, v_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free,
            blocks, table_row, start, shift, pages, key_size_0,
        )  # fmt: skip
        gl.warp_specialize(
            [
                (attend_rows_lse_0, rows_args),
                (attend_rows_lse_1, rows_args),
                (load_keys, load_args),
            ],
            [4, 1],
            [240, 24],
        )
