"""Flash attention's kernel pieces: `attend` (one block of rows over the keys of its
part), `fold` (one block of keys into the rows' running softmax) and `merge` (split
keys' parts combined), the grid they run on (`arrangement`) and the one call of
`attend` the applications make (`attend_tensors`).

Rows, not heads, are the unit of work: the query heads that share a key/value head
(grouped-query attention) and their queries are one list of group * seq_q rows, so a
block of rows reads each key block once for the whole group. The runtime passes the
output as (batch, heads_kv, group * seq_q, head_dim), a view of the contiguous
(batch, heads_q, seq_q, head_dim) result; programs cover (batch, key/value head,
block of rows). The arrangement gives that grid; the work is `attend`, a Triton
function the applications call with the tensors' pointers, sizes and strides.

Two ways to run, which the configuration picks (kernels/tuning/attention.py):
- split keys (decode: flash decoding): the keys are split into parts, so a batch-1
  decode still runs a program per multiprocessor; the launcher picks the parts per call
  from the grid (`split`), and the last part of a block of rows to finish merges the
  parts' partial results.
- unsplit (prefill): flash attention 2. Causal blocks of keys wholly below the diagonal
  run without mask arithmetic, only the diagonal ones are masked and those above it are
  never read; the scale is folded into base-2 exponents. On Hopper the keys and values
  load through TMA descriptors made on the device (aligned half-type calls).

A head_dim that is not a power of two runs in the next one's tiles, its padding masked
(TMA fills it with zeros).
"""

import triton
import triton.language as tl
from ninetoothed import Tensor

from .parts import arrive, claim, leave_rows, merged_rows, partial_results


def arrangement(output, *rest, block_size_m):
    """The grid: one program per (batch, key/value head, block of rows) of the output,
    passed as (batch, heads_kv, group * seq_q, head_dim). The other tensors are read
    through their pointers (`attend`): tiled only so that ninetoothed sees tiles."""
    tiled = [t.tile((1,) * t.ndim) if t.ndim else t for t in rest]
    return (output.tile((1, 1, block_size_m, -1)), *tiled)


def constants(dtype, spec, blocks, kind, split, tma):
    """The kernel's constexpr tensors, in `attend`'s order after the strides: the
    blocks (rows, keys, head dims), the mask's kind, the most parts (a power of two),
    IEEE products, and TMA where the specialisation guarantees what descriptors need:
    16-byte aligned heads and rows, head_dim of unit stride in the query, keys and
    values."""
    precision = "ieee"
    parts = triton.next_power_of_2(split) if split > 1 else 1
    aligned = spec is not None and spec.aligned and spec.width == 32
    use_tma = bool(tma) and aligned and dtype in ("fp16", "bf16") and spec.unit[1:4] == (3,) * 3
    values = (*blocks, kind, parts, precision, use_tma)
    return tuple(Tensor(0, constexpr=True, value=value) for value in values)


def workspace(config):
    """Split configurations: per program, a counter (int64: `arrive` needs no zeroed
    memory), then its partial result: the running maximum and sum of each row and
    the rows' fp32 accumulators."""
    if config.split <= 1:
        return (0, 0)
    rows, width = config.premake["block_size_m"], config.premake["block_size_d"]
    return (8 + 4 * rows * (2 + width), 0)


# The one call of `attend` over the source tensors' pointers, sizes and strides, which
# each application makes with its own mask pointer and strides (none and causal pass the
# output's and zeros: MASK < 2 reads no mask) and causal offset. Not a docstring:
# ninetoothed inlines this function into the applications, a docstring as a statement.
def attend_tensors(
    output, query, key, value, present_key, present_value, appended, bias, sb_b, sb_h, sb_s,
    sb_k, scale, offset, workspace, launch, block_m, block_n, block_d, kind, split, precision,
    tma,
):  # fmt: skip
    attend(
        query.source.data_ptr(), key.source.data_ptr(), value.source.data_ptr(),
        output.source.data_ptr(), present_key.source.data_ptr(),
        present_value.source.data_ptr(), bias,
        workspace.source.data_ptr(), launch, scale, offset, output.source.shape[0],
        output.source.shape[1], query.source.shape[2], key.source.shape[2], appended,
        output.source.shape[2], query.source.shape[3],
        query.source.stride(0), query.source.stride(1), query.source.stride(2),
        query.source.stride(3), key.source.stride(0), key.source.stride(1),
        key.source.stride(2), key.source.stride(3), value.source.stride(0),
        value.source.stride(1), value.source.stride(2), value.source.stride(3),
        present_key.source.stride(0), present_key.source.stride(1),
        present_key.source.stride(2), present_key.source.stride(3),
        output.source.stride(0), output.source.stride(1), output.source.stride(2),
        output.source.stride(3), sb_b, sb_h, sb_s, sb_k,
        block_m, block_n, block_d, kind, split, precision, tma,
    )  # fmt: skip


# ---- the kernel --------------------------------------------------------------------


@triton.jit
def fold(
    accumulator, running_max, running_sum, q, k_source, v_source, bias_base, first, origin,
    bound, sk_s, sk_d, sv_s, sv_d, sb_k, factor, rows_s, offset, columns_d, inside_d,
    BLOCK_N: tl.constexpr, MASK: tl.constexpr, BOUNDED: tl.constexpr,
    DIAGONAL: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Fold keys first .. first + BLOCK_N into the rows' running softmax-weighted sum.
    Key j lies at row j - origin of `k_source` and `v_source` (a KV cache's new entries
    are keys from `origin` on); BOUNDED: the block may run past `bound`, the keys'
    end; DIAGONAL: the causal diagonal crosses it. Scores are base-2 logits (scale *
    log2(e) applied). TMA: `k_source` and `v_source` are tensor descriptors (they fill
    rows past the bound and the padding of head_dim with zeros), else pointers."""
    columns = first + tl.arange(0, BLOCK_N)
    if TMA:  # 32-bit specialisations only: offsets fit
        k = k_source.load([first.to(tl.int32), 0])
        v = v_source.load([first.to(tl.int32), 0])
    else:
        # A whole block is masked only by a head_dim padded to a power of two.
        loaded = inside_d[None, :]
        if BOUNDED:
            loaded = (columns < bound)[:, None] & loaded
        rows = columns - origin
        keys = rows[:, None] * sk_s + columns_d[None, :] * sk_d
        k = tl.load(k_source + keys, mask=loaded, other=0.0)
        values = rows[:, None] * sv_s + columns_d[None, :] * sv_d
        v = tl.load(v_source + values, mask=loaded, other=0.0)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * factor
    if MASK < 2 and not BOUNDED and not DIAGONAL:
        # Every row sees every key of the block: no score is -inf (flash attention 2's
        # inner loop, the product accumulated in place). Folding the scale into exp2's
        # argument as one multiply-add (the maximum of the products scaled per row)
        # measured 4-9% slower on an H100 (Triton 3.9, 2026-11-23).
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        weights = tl.exp2(scores - new_max[:, None])
        decay = tl.exp2(running_max - new_max)
        accumulator = tl.dot(
            weights.to(v.dtype), v, accumulator * decay[:, None], input_precision=PRECISION
        )
        return accumulator, new_max, running_sum * decay + tl.sum(weights, 1)
    if MASK == 2:  # bool: True keeps
        bias = tl.load(bias_base + columns[None, :] * sb_k, mask=columns[None, :] < bound, other=0)
        scores = tl.where(bias != 0, scores, float("-inf"))
    if MASK == 3:  # float: added
        bias = tl.load(bias_base + columns[None, :] * sb_k, mask=columns[None, :] < bound, other=0)
        scores += bias.to(tl.float32) * 1.4426950408889634
    if BOUNDED:
        scores = tl.where(columns[None, :] < bound, scores, float("-inf"))
    if DIAGONAL:
        scores = tl.where(columns[None, :] <= rows_s[:, None] + offset, scores, float("-inf"))
    new_max = tl.maximum(running_max, tl.max(scores, 1))
    shift = tl.where(new_max == float("-inf"), 0.0, new_max)
    weights = tl.exp2(scores - shift[:, None])
    decay = tl.exp2(running_max - shift)
    accumulator = accumulator * decay[:, None] + tl.dot(
        weights.to(v.dtype), v, input_precision=PRECISION
    )
    return accumulator, new_max, running_sum * decay + tl.sum(weights, 1)


@triton.jit
def attend(
    q, k, v, o, pk, pv, bias, workspace, launch, scale, offset,
    batch, heads_kv, seq_q, seq_kv, appended, rows_total, head_dim,
    sq_b, sq_h, sq_s, sq_d, sk_b, sk_h, sk_s, sk_d, sv_b, sv_h, sv_s, sv_d,
    sp_b, sp_h, sp_s, sp_d, so_b, so_h, so_r, so_d, sb_b, sb_h, sb_s, sb_k,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    MASK: tl.constexpr, MAX_PARTS: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Attention of one block of rows (row r: query head kv_head * group + r // seq_q,
    query r % seq_q) over the keys of its part (all of them unless split: MAX_PARTS,
    a power of two, bounds the parts). MASK: 0 none, 1 causal (query i sees keys up to
    i + offset), 2 bool, 3 float tensor. TMA: keys and values load through tensor
    descriptors made on the device (16-byte aligned, unit-stride head_dim).

    The last `appended` keys and values are a KV cache's new entries, given in `pk`
    and `pv` (strides sp_*, shared): the launch writes them into the cache, each
    program a share, and every program reads them from pk and pv, never from the
    cache positions being written. A model's decode step so costs no copy kernels."""
    row_blocks = tl.cdiv(rows_total, BLOCK_M)
    tiles = batch * heads_kv * row_blocks
    pid = tl.program_id(0)
    if MAX_PARTS > 1:
        parts = tl.num_programs(0) // tiles
        tile = pid // parts
        part = pid % parts
        if parts > 1:
            claim(workspace.to(tl.pointer_type(tl.int64)) + tile, launch)
    else:
        parts = 1
        tile = pid
        part = 0
    z = tile // (heads_kv * row_blocks)
    kv_head = (tile // row_blocks) % heads_kv
    block = tile % row_blocks
    if MASK == 1:  # the longest rows first: they finish last otherwise
        block = row_blocks - 1 - block
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    live = rows < rows_total
    group = rows_total // seq_q
    rows_h = kv_head * group + tl.where(live, rows, 0) // seq_q
    rows_s = tl.where(live, rows, 0) % seq_q
    columns_d = tl.arange(0, BLOCK_D)
    inside_d = columns_d < head_dim
    cached = seq_kv - appended
    pk_head = pk + z * sp_b + kv_head * sp_h
    pv_head = pv + z * sp_b + kv_head * sp_h
    k_source = k + z * sk_b + kv_head * sk_h
    v_source = v + z * sv_b + kv_head * sv_h
    if appended > 0:
        share = block * parts + part  # of the row_blocks * parts programs of this head
        for first in tl.range(share * 16, appended, row_blocks * parts * 16):
            fresh = first + tl.arange(0, 16)
            inside = (fresh < appended)[:, None] & inside_d[None, :]
            entries = fresh[:, None] * sp_s + columns_d[None, :] * sp_d
            slots = (cached + fresh)[:, None]
            key_slots = k_source + slots * sk_s + columns_d[None, :] * sk_d
            tl.store(key_slots, tl.load(pk_head + entries, mask=inside), mask=inside)
            value_slots = v_source + slots * sv_s + columns_d[None, :] * sv_d
            tl.store(value_slots, tl.load(pv_head + entries, mask=inside), mask=inside)
    q_tile = tl.load(
        q + z * sq_b + rows_h[:, None] * sq_h + rows_s[:, None] * sq_s + columns_d[None, :] * sq_d,
        mask=live[:, None] & inside_d[None, :],
        other=0.0,
    )
    if TMA:  # over the cached keys: rows past them (new entries) load as zeros
        rows_kv = tl.maximum(cached, 1)
        k_source = tl.make_tensor_descriptor(
            k_source, [rows_kv, head_dim], [sk_s, 1], [BLOCK_N, BLOCK_D]
        )
        v_source = tl.make_tensor_descriptor(
            v_source, [rows_kv, head_dim], [sv_s, 1], [BLOCK_N, BLOCK_D]
        )
    bias_base = bias + z * sb_b + rows_h[:, None] * sb_h + rows_s[:, None] * sb_s
    factor = scale * 1.4426950408889634

    # This part's keys, whole blocks of them.
    per_part = tl.cdiv(tl.cdiv(seq_kv, BLOCK_N), parts) * BLOCK_N
    start = part * per_part
    end = tl.minimum(start + per_part, seq_kv)
    # Keys every row sees: all of them (masks aside), or below the causal diagonal of
    # the block's first query; and those some row sees (past the last query's: none).
    whole = end
    if MASK == 1:
        first_s = tl.min(tl.where(live, rows_s, seq_q))
        last_s = tl.max(tl.where(live, rows_s, 0))
        whole = tl.maximum(tl.minimum(end, first_s + offset + 1), start)
        end = tl.maximum(tl.minimum(end, last_s + offset + 1), start)
    # The cached keys' and the new entries' shares of them.
    fresh = tl.minimum(tl.maximum(cached, start), end)
    whole = tl.minimum(whole, fresh)
    unmasked = start + (whole - start) // BLOCK_N * BLOCK_N

    accumulator = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    running_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for first in tl.range(start, unmasked, BLOCK_N):
        accumulator, running_max, running_sum = fold(
            accumulator, running_max, running_sum, q_tile, k_source, v_source, bias_base, first,
            0, cached, sk_s, sk_d, sv_s, sv_d, sb_k, factor, rows_s, offset, columns_d, inside_d,
            BLOCK_N, MASK, False, False, PRECISION, TMA,
        )  # fmt: skip
    for first in tl.range(unmasked, fresh, BLOCK_N):
        accumulator, running_max, running_sum = fold(
            accumulator, running_max, running_sum, q_tile, k_source, v_source, bias_base, first,
            0, cached, sk_s, sk_d, sv_s, sv_d, sb_k, factor, rows_s, offset, columns_d, inside_d,
            BLOCK_N, MASK, True, MASK == 1, PRECISION, TMA,
        )  # fmt: skip
    # The new entries, read where they arrive (other programs write them into the cache):
    # a decode step's few, 16 at a time. Not pipelined, and in small blocks: the loops
    # above keep their registers and shared memory.
    for first in tl.range(fresh, end, 16, num_stages=1):
        accumulator, running_max, running_sum = fold(
            accumulator, running_max, running_sum, q_tile, pk_head, pv_head, bias_base, first,
            cached, end, sp_s, sp_d, sp_s, sp_d, sb_k, factor, rows_s, offset, columns_d,
            inside_d, 16, MASK, True, MASK == 1, PRECISION, False,
        )  # fmt: skip

    o_rows = o + z * so_b + kv_head * so_h + rows[:, None] * so_r + columns_d[None, :] * so_d
    stored = live[:, None] & inside_d[None, :]
    if MAX_PARTS > 1:
        if parts > 1:
            merge(
                accumulator, running_max, running_sum, workspace, launch,
                o + z * so_b + kv_head * so_h + block * BLOCK_M * so_r, so_r, so_d,
                tl.minimum(rows_total - block * BLOCK_M, BLOCK_M), head_dim, tile, part,
                parts, tl.cdiv(seq_kv, tl.maximum(per_part, 1)), BLOCK_M, BLOCK_D, MAX_PARTS,
            )  # fmt: skip
        else:
            result = tl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])
            tl.store(o_rows, result.to(o.dtype.element_ty), mask=stored)
    else:
        result = tl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])
        tl.store(o_rows, result.to(o.dtype.element_ty), mask=stored)


@triton.jit
def merge(
    accumulator, running_max, running_sum, workspace, launch, o_block, so_r, so_d, live_rows,
    head_dim, tile, part, parts, used,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, MAX_PARTS: tl.constexpr,
):  # fmt: skip
    """Split keys: leave this part's maximum, sum and accumulator of each row in the
    workspace; the last part of the block of rows to arrive rescales every part's to
    their common maximum and stores the rows (`o_block`: the block's first row, of
    `live_rows`). The sums over parts are reductions of one tile, so the result does
    not depend on who arrived when. Workspace: an int64 counter per program (one per
    block of rows in use), then each program's partial result."""
    counters = workspace.to(tl.pointer_type(tl.int64))
    partials = partial_results(workspace)
    size = BLOCK_M * (2 + BLOCK_D)
    columns = tl.arange(0, BLOCK_D)
    inside = columns < head_dim
    mine = partials + (tile * parts + part) * size
    leave_rows(mine, accumulator, running_max, running_sum, live_rows, inside, BLOCK_M, BLOCK_D)
    if arrive(counters + tile, launch) == parts:
        # A few rows at a time, of the parts holding keys: parts past the keys hold
        # nothing, and of the rows the live ones.
        # Rounds of parts and cells as merged_rows' docstring gives them.
        ROUND: tl.constexpr = 32 if MAX_PARTS > 32 else MAX_PARTS
        CELLS: tl.constexpr = 16384 if ROUND > 16 else 8192
        ROWS: tl.constexpr = CELLS // (ROUND * BLOCK_D) if ROUND * BLOCK_D < CELLS else 1
        first = partials + tile * parts * size
        for chunk in tl.range(0, live_rows, ROWS, num_stages=1):
            rows = chunk + tl.arange(0, ROWS)
            result, _, total = merged_rows(
                first, used, rows, live_rows, inside, BLOCK_M, BLOCK_D, ROUND
            )
            result = tl.where(total[:, None] == 0, 0.0, result / total[:, None])
            stored = (rows < live_rows)[:, None] & inside[None, :]
            o_rows = o_block + rows[:, None] * so_r + columns[None, :] * so_d
            tl.store(o_rows, result.to(o_block.dtype.element_ty), mask=stored)
        tl.store(counters + tile, 0)  # a graph's replay finds no count of its own
