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
    """Tag a unit of work's counter with the launch's id (unique in the process), at
    the start of each of its parts: the workspace comes unzeroed, and whatever the
    counter held is another launch's count or no count. Only the first claim of a
    launch changes it; the compare-and-swap of the others fails, and needs no retry:
    the counter holds this launch's tag by then. A graph replays its launch id, so the
    last part clears the counter (`arrive`)."""
    # Scalar atomics run once per program and their result reaches every thread:
    # a plain load could differ between threads.
    seen = tl.atomic_add(slot, 0, sem="relaxed", scope="gpu")
    if seen // 64 != launch:
        tl.atomic_cas(slot, seen, launch * 64, sem="relaxed", scope="gpu")


@triton.jit
def arrive(slot, launch):
    """Count one more part of a unit of work done (after `claim`), and return how
    many are (at most 63): one atomic, so parts that finish together do not queue on
    retries (a compare-and-swap loop here cost 11 us of a 23 us batch-1 decode)."""
    return tl.atomic_add(slot, 1, sem="acq_rel", scope="gpu") + 1 - launch * 64
