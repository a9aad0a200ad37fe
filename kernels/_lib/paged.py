"""Attention over ragged batches and paged KV caches: `attend_paged` (the rows of one
request and key/value head over the keys of its part), `fold_keys` (one block of keys
into the rows' running softmax), called by kernels/paged_attention.py's application
with the tensors' pointers and strides; decode's split (the balanced work list, the
parts merged) is paged_split.py's.

Work: the queries of a batch are packed along the tokens (FlashAttention's varlen
layout) and each request's rows are its queries times the query heads of a GQA group,
query-major: row t is query t // group of head kv_head * group + t % group, so a block
of rows reads each key once for every head of its group. A program takes one block of
BLOCK_M rows of one request and one key/value head. Request b's blocks are numbered
from cu_q[b] * group // BLOCK_M + b on: every request's blocks fit below
total_q * group // BLOCK_M + batch (the grid's bound, from shapes alone), and a
program finds its request by binary search. A mixed batch (a prefill chunk beside
decodes) so runs in one launch.

Keys: key j of request b is row j of its sequence: in a paged cache at page
table[b][j // page_size], slot j % page_size; packed (varlen) at row start[b] + j;
in a dense cache at row j of batch entry b. One formula serves the three (a page size
of 2^30 and a zero page stride make the page lookup vanish); offsets are in the
strides' type (the launcher takes caches of 2^31 elements or more to the 64-bit kernel)
and every index is clamped into the table and the cache, so no length or page number
can make a program read or write outside them.

Decode: the keys of each block of rows split into up to `parts` parts (the grid's
last dim, chosen per call from shapes), each at least `min_chunk` keys, so that a long
request among short ones still runs on many multiprocessors; or, where the launcher
passes a negative min_chunk, into parts of one size for the whole batch, balanced over
the grid (paged_split.py's `balanced_item`). The last part to finish combines the parts
(paged_split.py's `combine`, on parts.py's counters).
"""

import triton
import triton.language as tl

from .fp8 import quantized, reciprocal
from .paged_split import balanced_item, combine

# Numbers the kernel spells out (ninetoothed copies functions, not globals, into a
# kernel): 1.4426950408889634 is log2(e); 1073741824 (2^30), the page size that makes
# the page lookup of unpaged keys vanish (no sequence is longer); new cache entries (a
# decode step's) are written and folded 16 at a time.


@triton.jit
def query_start(cu_q, b, q_len):
    """Request b's first query in the packed tokens: b * q_len for a uniform batch."""
    # Masks are tensors (b * 0 + ...): Triton's interpreter refuses a Python bool.
    return tl.load(cu_q + b, mask=(b * 0 + q_len) == 0, other=0) + b * q_len


@triton.jit
def request_of(cu_q, block, batch, q_len, group, BLOCK_M: tl.constexpr):
    """The request whose blocks of rows hold block `block` (binary search)."""
    low = block * 0
    high = low + batch
    while high - low > 1:
        middle = (low + high) // 2
        first = query_start(cu_q, middle, q_len) * group // BLOCK_M + middle
        low = tl.where(first <= block, middle, low)
        high = tl.where(first <= block, high, middle)
    return low


@triton.jit
def key_length(k_lens, b, k_len, cumulative):
    """Request b's keys: the same for all (k_len >= 0), or from k_lens (counts, or
    cumulative counts: cu_seqlens_k)."""
    read = (b * 0 + k_len) < 0
    counted = tl.load(k_lens + b + cumulative, mask=read, other=0) - tl.load(
        k_lens + b, mask=read & (cumulative != 0), other=0
    )
    return tl.where(read, counted, k_len)


@triton.jit
def key_rows(table_row, first, start, page_size, pages, blocks, N):
    """Where keys first .. first + N lie: their page numbers (from the request's row of
    the table, clamped into the table's `pages` entries and the cache's `blocks` pages)
    and rows in the page (int32: the callers' offsets take the strides' type, 64-bit in
    the 64-bit kernel); unpaged keys (page_size 1073741824) read no table."""
    return page_numbers(table_row, first, page_size, pages, blocks, N), start + (
        first + tl.arange(0, N)
    ) % page_size


@triton.jit
def page_numbers(table_row, first, page_size, pages, blocks, N):
    """The page numbers of keys first .. first + N (key_rows')."""
    page = tl.minimum((first + tl.arange(0, N)) // page_size, pages - 1)
    number = tl.load(table_row + page, mask=(page * 0 + page_size) < 1073741824, other=0)
    return tl.minimum(tl.maximum(number, 0), blocks - 1)


@triton.jit
def fold_keys(
    accumulator, running_max, running_sum, q, k, v, columns, bound, query, diagonal, left,
    right, factor, softcap, MASKED: tl.constexpr,
):  # fmt: skip
    """Fold the keys `columns` (k and v: their [N, D] tiles, zero past `bound`) into
    the rows' running softmax-weighted sum. Scores are base-2 logits. MASKED: some row
    may not see some key: past `bound`, or outside the causal or sliding window (row
    of query i sees keys i + diagonal - left .. i + diagonal + right; -1: unbounded)."""
    scores = tl.dot(q, tl.trans(k))
    if softcap > 0.0:
        # softcap * tanh(scores * scale / softcap), as FlashAttention caps them
        capped = scores * (factor / 1.4426950408889634 / softcap)
        scores = (1.0 - 2.0 / (tl.exp2(capped * (2.0 * 1.4426950408889634)) + 1.0)) * (
            softcap * 1.4426950408889634
        )
    else:
        scores = scores * factor
    if MASKED:
        position = query[:, None] + diagonal
        seen = (columns < bound)[None, :] & (position >= 0)
        if right >= 0:
            seen = seen & (columns[None, :] <= position + right)
        if left >= 0:
            seen = seen & (columns[None, :] >= position - left)
        scores = tl.where(seen, scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        weights = tl.exp2(scores - shift[:, None])
        decay = tl.exp2(running_max - shift)
    else:
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        weights = tl.exp2(scores - new_max[:, None])
        decay = tl.exp2(running_max - new_max)
    accumulator = tl.dot(weights.to(v.dtype), v, accumulator * decay[:, None])
    return accumulator, new_max, running_sum * decay + tl.sum(weights, 1)


@triton.jit
def attend_paged(
    q, o, k, v, kn, vn, cu_q, k_starts, k_lens, table, lse, workspace, launch,
    k_scales, v_scales, scale, softcap, left, right, q_len, k_len, packed_k, cumulative,
    page_size, appended, min_chunk, batch, total_q, heads_q, heads_kv, head_dim, parts,
    blocks, pages, rows_kv, sq_t, sq_h, so_t, so_h, sk_a, sk_t, sk_h, sv_a, sv_t, sv_h,
    skn_b, skn_t, skn_h, svn_b, svn_t, svn_h, st_b, sl_b, sl_h, sl_t, ss_b, ss_h,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    MAX_PARTS: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Program: (block of rows, key/value head, part); the blocks of rows of the grid's
    first dim are looped over (prefill tiles cover several of the grid's 16-row units).
    Unpaged keys pass page_size 0. `appended` new entries per request (kn, vn: (batch,
    appended, heads_kv, head_dim)) go into the cache after its k_lens keys, written by
    the request's first block of rows and read by every block from kn and vn."""
    # Split parts count per tile of the grid's 16-row units: decode blocks are one unit.
    tl.static_assert(MAX_PARTS == 1 or BLOCK_M == 16)
    group = heads_q // heads_kv
    pid = tl.program_id(0)
    part = pid % parts
    kv_head = (pid // parts) % heads_kv
    unit = pid // (parts * heads_kv)
    units = tl.num_programs(0) // (parts * heads_kv)
    paged = page_size > 0
    page = tl.where(paged, page_size, 1073741824)
    queries = tl.minimum(query_start(cu_q, batch, q_len), total_q)
    row_blocks = queries * group // BLOCK_M + batch
    columns_d = tl.arange(0, BLOCK_D)
    inside_d = columns_d < head_dim
    factor = scale * 1.4426950408889634
    first_step = unit
    last_step = row_blocks
    least = min_chunk
    # The block's first partial-result slot: a balanced item's, or (-1) its tile's parts'.
    slot = pid * 0 - 1
    # Nested: the constexpr test keeps the branch out of the unsplit (prefill) kernels.
    if MAX_PARTS > 1:  # noqa: SIM102
        if min_chunk < 0:  # decode's work list balanced over the grid (`balanced_item`)
            least = min_chunk * 0 + 1
            block, part, parts, slot, go = balanced_item(
                cu_q, k_starts, k_lens, -min_chunk, unit * parts + part, units * parts, kv_head,
                batch, q_len, total_q, group, k_len, cumulative, packed_k, paged, page, pages,
                rows_kv, appended, BLOCK_M, 64,
            )  # fmt: skip
            first_step = block
            last_step = tl.where(go, block + 1, block)
    for step in tl.range(first_step, last_step, units, num_stages=1):
        # Unsplit (prefill) blocks the last first: a request's last rows see the most
        # keys, and decodes beside a chunk see more than its rows (mixed batch 1.11x).
        block = row_blocks - 1 - step if MAX_PARTS == 1 else step
        first_slot = tl.where(slot < 0, (block * heads_kv + kv_head) * parts, slot)
        b = request_of(cu_q, block, batch, q_len, group, BLOCK_M)
        q_first = tl.minimum(query_start(cu_q, b, q_len), total_q)
        q_end = tl.minimum(query_start(cu_q, b + 1, q_len), total_q)
        q_count = tl.maximum(q_end - q_first, 0)
        local = block - (q_first * group // BLOCK_M + b)
        rows = local * BLOCK_M + tl.arange(0, BLOCK_M)
        live = rows < q_count * group
        if local * BLOCK_M < q_count * group:
            attend_block(
                q, o, k, v, kn, vn, k_starts, k_lens, table, lse, workspace, launch,
                k_scales, v_scales, softcap, left, right, k_len, packed_k, cumulative, page,
                appended, least, heads_kv, head_dim, blocks, pages, rows_kv, sq_t, sq_h, so_t,
                so_h, sk_a, sk_t, sk_h, sv_a, sv_t, sv_h, skn_b, skn_t, skn_h, svn_b, svn_t,
                svn_h, st_b, sl_b, sl_h, sl_t, ss_b, ss_h, q_len, factor, b, q_first, q_count,
                group, kv_head, rows, live, local, block, part, parts, first_slot, columns_d,
                inside_d, paged, BLOCK_M, BLOCK_N, BLOCK_D, MAX_PARTS, TMA,
            )  # fmt: skip


@triton.jit
def attend_block(
    q, o, k, v, kn, vn, k_starts, k_lens, table, lse, workspace, launch, k_scales, v_scales,
    softcap, left, right, k_len, packed_k, cumulative, page, appended, min_chunk,
    heads_kv, head_dim, blocks, pages, rows_kv, sq_t, sq_h, so_t, so_h, sk_a, sk_t, sk_h,
    sv_a, sv_t, sv_h, skn_b, skn_t, skn_h, svn_b, svn_t, svn_h, st_b,
    sl_b, sl_h, sl_t, ss_b, ss_h, q_len, factor, b, q_first, q_count, group, kv_head, rows,
    live, local, block, part, parts, slot, columns_d, inside_d, paged,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    MAX_PARTS: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """One block of rows of request b (see attend_paged), part `part` of its `parts`,
    whose partial results go to slots `slot` on (`combine`). TMA: the whole blocks of
    keys load through tensor descriptors (`keys_by_descriptor`), for calls whose keys
    are not paged or lie in pages of a multiple of BLOCK_N keys that follow each other
    in the cache (the launcher's bucket; prefill is unsplit: a part's keys start at
    the first any row sees). An FP8 cache (k's element type other than q's) holds keys
    and values times the reciprocals of the request's and head's scales (k_scales,
    v_scales at b * ss_b + kv_head * ss_h): its tiles are widened to fp16 before the
    products, the queries and probabilities taken in fp16 too (fp32 accumulation, as the
    half-type caches'); the key scale folded into the scores' factor and the value scale
    into the result; new entries are quantized as written and folded as the cache will
    give them back. fp16, not bf16 queries' type: FP8 to fp16 is one conversion a pair
    of values where bf16 takes three (H200, GQA 32/8 decode over pages of 16, batch 64
    and 256: 226 and 817 us in fp16, 311 and 1141 us in bf16, FlashInfer 293 and 893);
    a query past fp16's range (65504) would overflow."""
    QUANT: tl.constexpr = k.dtype.element_ty != q.dtype.element_ty
    tl.static_assert(not (QUANT and TMA))  # descriptors of the half types' tiles
    if QUANT:
        scale_at = b.to(tl.int64) * ss_b + kv_head * ss_h
        k_scale = tl.load(k_scales + scale_at)
        v_scale = tl.load(v_scales + scale_at)
        factor = factor * k_scale
    query = tl.where(live, rows, 0) // group
    head = kv_head * group + tl.where(live, rows, 0) % group
    start = tl.load(k_starts + b, mask=(b * 0 + packed_k) != 0, other=0)
    # The keys in the cache, bounded by what the table (or a dense cache, or the
    # packed keys) holds.
    capacity = tl.where(paged, pages * page, tl.maximum(rows_kv - start, 0))
    cached = tl.minimum(tl.maximum(key_length(k_lens, b, k_len, cumulative), 0), capacity)
    fresh = tl.minimum(appended, tl.maximum(capacity - cached, 0))
    keys = cached + appended
    diagonal = keys - q_count
    table_row = table + b.to(tl.int64) * st_b
    k_base = k + kv_head * sk_h
    v_base = v + kv_head * sv_h
    # A dense cache: batch entry b (its first dim).
    dense = tl.where((page >= 1073741824) & (packed_k == 0), b, 0).to(tl.int64)
    k_base += dense * sk_a
    v_base += dense * sv_a
    sk_page = tl.where(paged, sk_a, 0)
    sv_page = tl.where(paged, sv_a, 0)
    kn_head = kn + b.to(tl.int64) * skn_b + kv_head * skn_h
    vn_head = vn + b.to(tl.int64) * svn_b + kv_head * svn_h
    if (appended > 0) & (local == 0):  # the request's first block writes them, parts sharing
        for first in tl.range(part * 16, fresh, parts * 16, num_stages=1):
            entry = first + tl.arange(0, 16)
            inside = (entry < fresh)[:, None] & inside_d[None, :]
            at = entry[:, None] * skn_t + columns_d[None, :]
            number, row = key_rows(table_row, cached + first, start, page, pages, blocks, 16)
            key_at = number * sk_page + row * sk_t
            value_at = number * sv_page + row * sv_t
            entries = tl.load(kn_head + at, mask=inside)
            if QUANT:
                entries = as_cached(entries, k_scale, k.dtype.element_ty)
            tl.store(k_base + key_at[:, None] + columns_d[None, :], entries, mask=inside)
            at = entry[:, None] * svn_t + columns_d[None, :]
            entries = tl.load(vn_head + at, mask=inside)
            if QUANT:
                entries = as_cached(entries, v_scale, v.dtype.element_ty)
            tl.store(v_base + value_at[:, None] + columns_d[None, :], entries, mask=inside)
    first_query = tl.min(tl.where(live, query, q_count))
    last_query = tl.max(tl.where(live, query, 0))
    # Keys some row sees: [low, high); keys every row sees: [full_low, full_high).
    high = tl.where(right >= 0, tl.minimum(keys, last_query + diagonal + right + 1), keys)
    full_high = tl.where(right >= 0, first_query + diagonal + right + 1, keys)
    low = tl.where(left >= 0, tl.maximum(first_query + diagonal - left, 0), 0)
    full_low = tl.where(left >= 0, last_query + diagonal - left, 0)
    span = tl.maximum(high - low, 0)
    used = tl.minimum(tl.maximum(tl.cdiv(span, min_chunk), 1), parts)
    if MAX_PARTS == 1:  # built unsplit (the 64-bit kernel): part 0 takes every key
        used = 1
    per_part = tl.cdiv(tl.cdiv(span, BLOCK_N), used) * BLOCK_N
    if part < used:
        q_rows = q + (q_first + query).to(tl.int64)[:, None] * sq_t + head[:, None] * sq_h
        q_tile = tl.load(
            q_rows + columns_d[None, :], mask=live[:, None] & inside_d[None, :], other=0.0
        )
        if QUANT:  # products in fp16: one conversion of FP8 a pair of values (bf16: three)
            q_tile = q_tile.to(tl.float16)
        accumulator = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        running_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        running_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
        s = low + part * per_part
        e = tl.minimum(s + per_part, high)
        # The cached keys of the part: whole blocks every row sees without masks, the
        # others (before and after them) masked.
        cached_end = tl.maximum(tl.minimum(e, cached), s)
        if TMA:  # whole blocks at multiples of BLOCK_N: each within one page
            u0 = tl.cdiv(tl.maximum(full_low, s), BLOCK_N) * BLOCK_N
        else:
            u0 = s + tl.cdiv(tl.maximum(full_low - s, 0), BLOCK_N) * BLOCK_N
        u0 = tl.minimum(u0, cached_end)
        u1 = u0 + tl.maximum(tl.minimum(cached_end, full_high) - u0, 0) // BLOCK_N * BLOCK_N
        # Counted from 0 in steps of 1: Triton 3.9 left the loop over range(u0, u1,
        # BLOCK_N) unpipelined (synchronous loads in its TTGIR), which cost decode 7-11%
        # and prefill 31% (H100, 2026-11-26). Offsets in the strides' type (32 bits in
        # the 32-bit kernel): 64-bit offsets of [BLOCK_N, BLOCK_D] tiles spilled, and a
        # 64-bit pointer per key row cost prefill 31%. The page numbers come a block
        # ahead, by plain loads: loaded in the block's iteration, the table went through
        # the pipeline as an async copy committed after the next block's keys and values,
        # and waiting for it waited for them too (two buffers of three stages, the loads
        # of one block in flight: 8 ragged prefills 5-7% slower, the mixed batch 12%).
        whole = (u1 - u0) // BLOCK_N
        if TMA:
            accumulator, running_max, running_sum = keys_by_descriptor(
                accumulator, running_max, running_sum, q_tile, k_base, v_base, table_row,
                start, page, pages, blocks, rows_kv, sk_t, sv_t, head_dim, u0, whole,
                cached_end, query, diagonal, left, right, factor, softcap, BLOCK_N, BLOCK_D,
            )  # fmt: skip
        else:
            upcoming = page_numbers(table_row, u0, page, pages, blocks, BLOCK_N)
            for index in tl.range(0, whole):
                first = u0 + index * BLOCK_N
                number = upcoming
                upcoming = page_numbers(table_row, first + BLOCK_N, page, pages, blocks, BLOCK_N)
                row = start + (first + tl.arange(0, BLOCK_N)) % page
                at = (number * sk_page + row * sk_t)[:, None] + columns_d[None, :]
                kt = tl.load(k_base + at, mask=inside_d[None, :], other=0.0)
                at = (number * sv_page + row * sv_t)[:, None] + columns_d[None, :]
                vt = tl.load(v_base + at, mask=inside_d[None, :], other=0.0)
                if QUANT:
                    kt, vt = kt.to(tl.float16), vt.to(tl.float16)
                accumulator, running_max, running_sum = fold_keys(
                    accumulator, running_max, running_sum, q_tile, kt, vt,
                    first + tl.arange(0, BLOCK_N), cached_end, query, diagonal, left, right,
                    factor, softcap, False,
                )  # fmt: skip
        before = tl.cdiv(u0 - s, BLOCK_N)
        after = tl.cdiv(cached_end - u1, BLOCK_N)
        # A block or two at the diagonal or a window's edge: unpipelined, its buffers
        # and registers would cost the loop above (decode 2-7% faster without).
        # The blocks before u0 end there (the last may reach past it).
        for index in tl.range(0, before + after, num_stages=1):
            first = tl.where(index < before, s + index * BLOCK_N, u1 + (index - before) * BLOCK_N)
            bound = tl.where(index < before, u0, cached_end)
            columns = first + tl.arange(0, BLOCK_N)
            loaded = (columns < bound)[:, None] & inside_d[None, :]
            number, row = key_rows(table_row, first, start, page, pages, blocks, BLOCK_N)
            at = (number * sk_page + row * sk_t)[:, None] + columns_d[None, :]
            kt = tl.load(k_base + at, mask=loaded, other=0.0)
            at = (number * sv_page + row * sv_t)[:, None] + columns_d[None, :]
            vt = tl.load(v_base + at, mask=loaded, other=0.0)
            if QUANT:
                kt, vt = kt.to(tl.float16), vt.to(tl.float16)
            accumulator, running_max, running_sum = fold_keys(
                accumulator, running_max, running_sum, q_tile, kt, vt, columns, bound, query,
                diagonal, left, right, factor, softcap, True,
            )  # fmt: skip
        # The new entries, read where they arrive (the first block writes them into the
        # cache): a decode step's few, 16 at a time.
        for first in tl.range(tl.maximum(s, cached), e, 16, num_stages=1):
            columns = first + tl.arange(0, 16)
            entry = columns - cached
            loaded = (columns < e)[:, None] & inside_d[None, :]
            kt = tl.load(
                kn_head + entry[:, None] * skn_t + columns_d[None, :], mask=loaded, other=0.0
            )
            vt = tl.load(
                vn_head + entry[:, None] * svn_t + columns_d[None, :], mask=loaded, other=0.0
            )
            if QUANT:  # as the cache holds them now
                kt = as_cached(kt, k_scale, k.dtype.element_ty).to(tl.float16)
                vt = as_cached(vt, v_scale, v.dtype.element_ty).to(tl.float16)
            accumulator, running_max, running_sum = fold_keys(
                accumulator, running_max, running_sum, q_tile, kt, vt, columns, e, query,
                diagonal, left, right, factor, softcap, True,
            )  # fmt: skip
        # The request's rows of the output and of the log-sum-exp ((batch, heads, seqlen)
        # for a uniform batch, (heads, total_q) for packed queries).
        o_request = o + q_first.to(tl.int64) * so_t
        lse_request = lse + tl.where(q_len > 0, b, 0).to(tl.int64) * sl_b
        lse_request += tl.where(q_len > 0, 0, q_first).to(tl.int64) * sl_t
        o_rows = o_request + query[:, None] * so_t + head[:, None] * so_h
        lse_rows = lse_request + head * sl_h + query * sl_t
        if QUANT:
            accumulator = accumulator * v_scale
        if MAX_PARTS > 1:
            if used > 1:
                combine(
                    accumulator, running_max, running_sum, workspace, launch, o_request,
                    lse_request, local * BLOCK_M, tl.minimum(q_count * group - local * BLOCK_M,
                    BLOCK_M), group, kv_head, so_t, so_h, sl_h, sl_t, head_dim,
                    block * heads_kv + kv_head, slot + part, slot, used, BLOCK_M, BLOCK_D,
                    MAX_PARTS,
                )  # fmt: skip
            else:
                finish(accumulator, running_max, running_sum, o_rows, lse_rows, live, inside_d)
        else:
            finish(accumulator, running_max, running_sum, o_rows, lse_rows, live, inside_d)


@triton.jit
def as_cached(values, scale, element):
    """New entries as an FP8 cache holds them: times the scale's reciprocal, saturated
    (_lib/fp8.py's `quantized`), in the cache's `element` type."""
    return quantized(values.to(tl.float32), reciprocal(scale)).to(element)


@triton.jit
def keys_by_descriptor(
    accumulator, running_max, running_sum, q_tile, k_base, v_base, table_row, start, page,
    pages, blocks, rows_kv, sk_t, sv_t, head_dim, u0, whole, bound, query, diagonal, left,
    right, factor, softcap, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """Fold `whole` blocks of keys from u0 on, each within one page (or unpaged), loaded
    by TMA: the cache as rows of one key/value head (pages one after another), a block
    one copy from its page's row, which comes a block ahead (attend_block's loop says
    why). The descriptors fill head_dim's padding with zeros."""
    paged = page < 1073741824
    rows = tl.maximum(tl.where(paged, blocks * page, rows_kv), 1)
    k_rows = tl.make_tensor_descriptor(k_base, [rows, head_dim], [sk_t, 1], [BLOCK_N, BLOCK_D])
    v_rows = tl.make_tensor_descriptor(v_base, [rows, head_dim], [sv_t, 1], [BLOCK_N, BLOCK_D])
    upcoming = block_row(table_row, u0, start, page, pages, blocks)
    for index in tl.range(0, whole):
        first = u0 + index * BLOCK_N
        at = upcoming
        upcoming = block_row(table_row, first + BLOCK_N, start, page, pages, blocks)
        kt = k_rows.load([at, 0])
        vt = v_rows.load([at, 0])
        accumulator, running_max, running_sum = fold_keys(
            accumulator, running_max, running_sum, q_tile, kt, vt,
            first + tl.arange(0, BLOCK_N), bound, query, diagonal, left, right, factor,
            softcap, False,
        )  # fmt: skip
    return accumulator, running_max, running_sum


@triton.jit
def block_row(table_row, first, start, page_size, pages, blocks):
    """The row of key `first` in the cache seen as rows (keys_by_descriptor's): its
    page's number times the page size plus its slot, or start + first unpaged."""
    paged = page_size < 1073741824
    page = tl.minimum(first // page_size, pages - 1)
    number = tl.load(table_row + page, mask=paged, other=0)
    number = tl.minimum(tl.maximum(number, 0), blocks - 1)
    return tl.where(paged, number * page_size + first % page_size, start + first)


@triton.jit
def finish(accumulator, running_max, running_sum, o_rows, lse_rows, live, inside_d):
    """Store the rows and their log-sum-exp (natural log; +inf for a row that saw no
    key, whose output is 0, as FlashAttention gives them)."""
    empty = running_sum == 0
    result = tl.where(empty[:, None], 0.0, accumulator / running_sum[:, None])
    columns_d = tl.arange(0, accumulator.shape[1])
    tl.store(
        o_rows + columns_d[None, :],
        result.to(o_rows.dtype.element_ty),
        mask=live[:, None] & inside_d[None, :],
    )
    lse = tl.where(empty, float("inf"), (running_max + tl.log2(running_sum)) / 1.4426950408889634)
    tl.store(lse_rows, lse, mask=live)
