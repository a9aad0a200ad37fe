"""Paged decode's split (kernels/_lib/paged.py's attend_paged): the work list a batch's
keys are balanced over (`balanced_item`), and the merge of a block's parts by the last
to arrive (`combine`, on parts.py's counters)."""

import triton
import triton.language as tl

from .parts import arrive, claim, leave_rows, merged_rows, partial_results


@triton.jit
def balanced_item(
    cu_q, k_starts, k_lens, code, item, items, kv_head, batch, q_len, total_q, group, k_len,
    cumulative, packed_k, paged, page, pages, rows_kv, appended,
    BLOCK_M: tl.constexpr, LANES: tl.constexpr,
):  # fmt: skip
    """Decode's work list, balanced over the grid as FlashInfer's plan balances it on
    the host, here from the lengths in GPU memory: every block of rows of a batch of up
    to LANES requests splits its keys into parts of one size, the least multiple of 16
    keys (at least `least`) for which the batch's parts number at most `target` (the
    launcher's `code`: target << 16 | least); the parts are numbered request by
    request, block by block, and program `item` of the `items` a key/value head has
    takes the one of its number. Returns that part's block (the grid's numbering),
    part and parts, its first partial-result slot (the block's parts one after another,
    `items` slots a key/value head), and whether there is one: (block, part, parts,
    slot, go). The parts of a block cover at least its keys, so a block's span (its
    rows' window) never needs more."""
    target = code >> 16
    least = code & 65535
    lanes = tl.arange(0, LANES)
    inside = lanes < batch
    listed = inside & ((lanes * 0 + q_len) == 0)
    first = tl.load(cu_q + lanes, mask=listed, other=0) + lanes * q_len
    last = tl.load(cu_q + lanes + 1, mask=listed, other=0) + (lanes + 1) * q_len
    first = tl.minimum(first, total_q)
    queries = tl.maximum(tl.minimum(last, total_q) - first, 0)
    rows = tl.where(inside, tl.cdiv(queries * group, BLOCK_M), 0)
    read = inside & ((lanes * 0 + k_len) < 0)
    counted = tl.load(k_lens + lanes + cumulative, mask=read, other=0) - tl.load(
        k_lens + lanes, mask=read & ((lanes * 0 + cumulative) != 0), other=0
    )
    start = tl.load(k_starts + lanes, mask=inside & ((lanes * 0 + packed_k) != 0), other=0)
    capacity = tl.where(paged, pages * page, tl.maximum(rows_kv - start, 0))
    length = tl.where(read, counted, k_len)
    keys = tl.where(inside, tl.minimum(tl.maximum(length, 0), capacity) + appended, 0)
    # Parts of total / (target - blocks) keys always fit (a block's parts round up by
    # less than one); the least that fits lies between that and total / target.
    total = tl.sum(rows.to(tl.float32) * keys.to(tl.float32))
    blocks = tl.sum(rows)
    low = tl.maximum((least + 15) // 16, (total / target / 16).to(tl.int32))
    high = (total / tl.maximum(target - blocks, 1) / 16).to(tl.int32) + 1
    high = tl.minimum(tl.maximum(low, high), 1 << 26)
    while low < high:
        middle = (low + high) // 2
        fits = tl.sum(rows * tl.maximum(tl.cdiv(keys, middle * 16), 1)) <= target
        low = tl.where(fits, low, middle + 1)
        high = tl.where(fits, middle, high)
    parts = tl.maximum(tl.cdiv(keys, high * 16), 1)
    counts = rows * parts
    ends = tl.cumsum(counts, 0)
    b = tl.sum((ends <= item).to(tl.int32))
    mine = lanes == b
    parts_b = tl.maximum(tl.sum(tl.where(mine, parts, 0)), 1)
    begin = tl.sum(tl.where(mine, ends - counts, 0))
    local = (item - begin) // parts_b
    block = tl.sum(tl.where(mine, first, 0)) * group // BLOCK_M + b + local
    slot = kv_head * items + begin + local * parts_b
    return block, (item - begin) % parts_b, parts_b, slot, b < batch


@triton.jit
def combine(
    accumulator, running_max, running_sum, workspace, launch, o_request, lse_request,
    first_row, live_rows, group, kv_head, so_t, so_h, sl_h, sl_t, head_dim, tile, own,
    first_slot, used, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, MAX_PARTS: tl.constexpr,
):  # fmt: skip
    """Split keys: leave this part's maximum, sum and accumulator of each row in the
    workspace (partial-result slot `own`; the tile's parts' from `first_slot` on, one
    after another); the last of the `used` parts to arrive rescales every part's to their
    common maximum and stores the rows (the block's `live_rows` from `first_row` of the
    request's rows). Every part's partial results of a few rows come in one round of
    loads: a loop over the parts waited on L2 once per part (11 of a batch-1 decode's
    20 us). Workspace: an int64 counter per program (one per tile of rows in use), then
    each program's partial result."""
    counters = workspace.to(tl.pointer_type(tl.int64))
    slot = counters + tile
    claim(slot, launch)
    partials = partial_results(workspace)
    size = BLOCK_M * (2 + BLOCK_D)
    columns = tl.arange(0, BLOCK_D)
    inside = columns < head_dim
    mine = partials + own.to(tl.int64) * size
    leave_rows(mine, accumulator, running_max, running_sum, live_rows, inside, BLOCK_M, BLOCK_D)
    if arrive(slot, launch) == used:
        # Rounds of parts and cells as merged_rows' docstring gives them.
        ROUND: tl.constexpr = 32 if MAX_PARTS > 32 else MAX_PARTS
        CELLS: tl.constexpr = 16384 if ROUND > 16 else 8192
        ROWS: tl.constexpr = CELLS // (ROUND * BLOCK_D) if ROUND * BLOCK_D < CELLS else 1
        first = partials + first_slot.to(tl.int64) * size
        for chunk in tl.range(0, live_rows, ROWS, num_stages=1):
            rows = chunk + tl.arange(0, ROWS)
            result, shift, total = merged_rows(
                first, used, rows, live_rows, inside, BLOCK_M, BLOCK_D, ROUND
            )
            result = tl.where(total[:, None] == 0, 0.0, result / total[:, None])
            row = first_row + rows
            query = row // group
            head = kv_head * group + row % group
            stored = rows < live_rows
            o_rows = o_request + query[:, None] * so_t + head[:, None] * so_h + columns[None, :]
            tl.store(o_rows, result.to(o_request.dtype.element_ty), mask=stored[:, None] & inside)
            lse = tl.where(total == 0, float("inf"), (shift + tl.log2(total)) / 1.4426950408889634)
            tl.store(lse_request + head * sl_h + query * sl_t, lse, mask=stored)
        tl.store(slot, 0)  # a graph's replay finds no count of its own
