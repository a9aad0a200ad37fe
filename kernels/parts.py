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
def arrive(slot, launch):
    """Count one more part of a unit of work done, and return how many are (at most
    63). The counter tags its count with the launch's id (unique in the process): the
    workspace comes unzeroed, and whatever it held before is another launch's count or
    no count. A graph replays its launch id, so the last part clears the counter."""
    tag = launch * 64
    done = False
    count = tag - tag  # an int64 zero: loop-carried values keep their type
    while not done:
        # Scalar atomics run once per program and their result reaches every thread:
        # a plain load could differ between threads and split them across the loop.
        seen = tl.atomic_add(slot, 0, sem="acquire", scope="gpu")
        wanted = tl.where(seen // 64 == launch, seen + 1, tag + 1)
        done = tl.atomic_cas(slot, seen, wanted, sem="acq_rel", scope="gpu") == seen
        count = wanted - tag
    return count
