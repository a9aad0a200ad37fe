"""Work split into parts (split K in matrix products, split keys in attention): the
parts of one unit of work leave partial results in the launcher's workspace, and the
last part to arrive combines them.

The workspace comes unzeroed: an int64 counter per program first (one per unit of work
in use), then the partial results (`partial_results`). These helpers are imported by name:
ninetoothed takes the Triton functions an application calls from its module's globals.
"""

import triton
import triton.language as tl


@triton.jit
def partial_results(workspace):
    """The fp32 partial results, after one int64 counter per program (in 128-byte rows
    of 16), of a workspace addressed in int32 words."""
    return (workspace + tl.cdiv(tl.num_programs(0), 16) * 32).to(tl.pointer_type(tl.float32))


@triton.jit
def claim(slot, launch):
    """Tag a unit of work's counter with the launch's tag (`arrive`), at the start of
    each of its parts: the workspace comes unzeroed, and whatever the counter held is
    another launch's count or no count. Only the first claim of a launch changes it;
    the compare-and-swap of the others fails, and needs no retry: the counter holds
    this launch's tag by then. A graph replays its launch id, so the last part clears
    the counter."""
    # Scalar atomics run once per program and their result reaches every thread:
    # a plain load could differ between threads.
    tag = (tl.cast(launch, tl.int64) * 6364136223846793005) & -64
    seen = tl.atomic_add(slot, 0, sem="relaxed", scope="gpu")
    if (seen & -64) != tag:
        tl.atomic_cas(slot, seen, tag, sem="relaxed", scope="gpu")


@triton.jit
def arrive(slot, launch):
    """Count one more part of a unit of work done (after `claim`), and return how
    many are (at most 63): one atomic, so parts that finish together do not queue on
    retries (a compare-and-swap loop here cost 11 us of a 23 us batch-1 decode).

    A counter holds its launch's tag plus its count, the tag being the launch id times
    an odd 64-bit constant (a bijection of the 64-bit integers, wrapping) with the low
    six bits cleared. Tagged with the id times 64, as it first was, stale workspace
    memory that held 64 x id + k (any small integer an earlier kernel left there: a
    size, a stride; 37,888 bytes is 64 x 592) passed for k parts of this launch, and a
    tile merged before its parts were in: in a tuning run on an H100 (2026-11-26) one
    split-K call went wrong at the same point of the run every time, and never with
    the counters zeroed. A tag spread over 58 bits is held by stale memory by chance
    only."""
    tag = (tl.cast(launch, tl.int64) * 6364136223846793005) & -64
    return tl.atomic_add(slot, 1, sem="acq_rel", scope="gpu") + 1 - tag


@triton.jit
def leave_rows(
    mine, accumulator, running_max, running_sum, live_rows, inside,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """Attention's split keys: leave one part's partial result at `mine` (each row's
    running maximum and sum, then the live rows' fp32 accumulators, `inside` head_dim)
    before its `arrive`."""
    within = tl.arange(0, BLOCK_M)
    columns = tl.arange(0, BLOCK_D)
    tl.store(mine + within, running_max)
    tl.store(mine + BLOCK_M + within, running_sum)
    cells = mine + 2 * BLOCK_M + within[:, None] * BLOCK_D + columns[None, :]
    tl.store(cells, accumulator, mask=(within < live_rows)[:, None] & inside[None, :])
    tl.debug_barrier()  # every thread's part stored before the counter says so


@triton.jit
def merged_rows(
    first, used, rows, live_rows, inside,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, ROUND: tl.constexpr,
):  # fmt: skip
    """Rows `rows` of the first `used` parts' partial results (`leave_rows`, one after
    another from `first`), rescaled to their common maximum: (the rows' weighted sum of
    accumulators, that maximum, the weighted sum of sums). The parts come ROUND at a
    time in one round of loads each (the merge is a step's tail: a loop over the parts
    one by one, even pipelined, waited on L2 once per part), so up to ROUND parts take
    one round and a split past them one more per ROUND, in the registers of one. The
    sums over a round's parts are reductions of one tile, and the rounds come in order,
    so the result does not depend on which part arrived when. Callers take up to 32
    parts a round, in 8192 cells (ROUND parts of their rows, 64 registers a thread in
    4 warps), 16384 past 16 parts (H100, 32 parts: a GQA group of 7 over 32768 keys
    32.2 -> 31.3 us against two rounds of 16 in 8192 cells)."""
    size = BLOCK_M * (2 + BLOCK_D)
    columns = tl.arange(0, BLOCK_D)
    result = tl.zeros((rows.shape[0], BLOCK_D), dtype=tl.float32)
    highest = tl.full(rows.shape, float("-inf"), dtype=tl.float32)
    total = tl.zeros(rows.shape, dtype=tl.float32)
    for base in tl.range(0, used, ROUND, num_stages=1):
        others = base + tl.arange(0, ROUND)
        read = (others < used)[:, None] & (rows < live_rows)[None, :]
        slots = first + others[:, None] * size + rows[None, :]
        maxima = tl.load(slots, mask=read, other=float("-inf"), cache_modifier=".cg")
        sums = tl.load(slots + BLOCK_M, mask=read, other=0.0, cache_modifier=".cg")
        rows_at = first + others[:, None] * size + 2 * BLOCK_M + rows[None, :] * BLOCK_D
        partial = tl.load(
            rows_at[:, :, None] + columns[None, None, :],
            mask=read[:, :, None] & inside[None, None, :],
            other=0.0,
            cache_modifier=".cg",
        )
        new_highest = tl.maximum(highest, tl.max(maxima, 0))
        shift = tl.where(new_highest == float("-inf"), 0.0, new_highest)
        weights = tl.exp2(maxima - shift[None, :])
        decay = tl.exp2(highest - shift)
        result = result * decay[:, None] + tl.sum(weights[:, :, None] * partial, 0)
        total = total * decay + tl.sum(weights * sums, 0)
        highest = new_highest
    return result, tl.where(highest == float("-inf"), 0.0, highest), total
