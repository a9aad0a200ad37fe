"""sampling: a token per row of logits, as a serving loop's sampling step draws it:
temperature, then top-k, min-p and top-p filters, then a draw from what is left
renormalised; temperature 0 (or top-k 1) takes the argmax. Every parameter is a number
for the whole batch or a tensor with a value per row (aot/runtime/_sampling.py).

Without sorting, in steps (the switch `step`; aot/runtime/_sampling.py launches them):
1. "chunks", a program per chunk of a row (4096 logits): its maximum, the first index
   of it (or of its first NaN) and the sum of exp((x - its max) / temperature); for
   top-k below 64 rows, the histogram of its keys' first byte. At batch 1 the row's 32
   chunks load at once where one program would wait on 32 loads in turn (H200: that
   pass alone took ~35 us of one program at batch 1);
2. "digits" (top-k below 64 rows), a program per chunk: the first byte's bucket of the
   row's k-th largest key from the chunks' histograms, and the chunk's histogram of
   the second byte inside it;
3. "rows", a program per row: the chunks' results merged (the row's maximum, its first
   index, greedy rows stop here, and the mass), then
   - with a bound (top-k or min-p), a launch of its own that finds it and stops:
     top-k's k-th largest logit by a radix select over order-preserving keys of the
     values (8 bits a step from the top, the first two from the histograms where the
     digits step ran, else passes over the row: 2 for bf16 logits, at most 4 for fp32;
     it stops as soon as a bucket holds exactly the rows still wanted, or once the
     bytes read hold all of the dtype's bits (bf16's two, fp16's three: the bucket is
     then the k-th value and its ties); ties with the k-th value are all kept); min-p
     raises it to max + temperature * log(min_p);
4. "bounded", a program per chunk: its mass above the row's bound; its build
   "survivors", where the draw applies top-p (flag 128), the chunk's survivors too,
   into its row's buffer of `capacity` (a slot range taken by one atomic a chunk, the
   counter `taken`);
5. "rows" again, drawing: a uniform times the mass left, the chunk it falls in found
   from the chunks' masses, then a cumulative sum inside that one tile (inverse CDF,
   one uniform a round from Philox keyed by the row's seed);
   - top-p, by rejection as FlashInfer's sampler does it: the drawn token is kept when
     the tokens strictly more probable than it hold less than top_p of the mass left
     after top-k (a pass over the row); else the bound rises past its value and the
     draw repeats over what is above (passes over the row), which holds the whole top-p
     set, so the accepted token is distributed as the renormalised top-p set is,
     exactly. The argmax always passes: the loop ends.
   - top-p over a buffer of survivors (the build "nucleus", flag 128, where the
     bound left at most `capacity` tokens: top-k of up to 1024 and its ties, a tight
     min-p): no rounds.
     The survivors, sorted (by value, then index), give the top-p set at once: the
     tokens whose strictly more probable ones hold less than top_p of the mass, the
     rule the rejection applies; the draw is over it, renormalised.
"""

import functools

import ninetoothed.language as ntl
import triton
import triton.language as tl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

from ._lib import chunks, reduction

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2,),
    # "survivors" and "nucleus": the bounded and rows steps with top-p over the
    # survivors (flag 128) compiled in; the others are built without it (its code
    # costs the bounded step 2.5x its registers, a third of its occupancy).
    switches={"step": ("chunks", "digits", "bounded", "rows", "survivors", "nucleus")},
    coalesce="none",
    # (Not `leading` and `second`: written only under flag 64; without it the runtime
    # passes stride-0 stand-ins, which the launcher refuses as outputs.)
    # (Nor `survivors` and `taken`: written under flag 128 only, through pointers.)
    outputs=("output", "peaks", "firsts", "masses", "kept", "bounds"),
    # The per-row parameters may be one value broadcast (stride 0) or unused views; the
    # chunks' results are a few values a row.
    unspecialized=(
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "peaks",
        "firsts",
        "masses",
        "kept",
        "bounds",
        "output",
        "leading",
        "second",
        "survivors",
        "taken",
    ),
    dims={
        "logits": ("rows", "vocabulary"),
        "temperatures": ("rows",),
        "top_ks": ("rows",),
        "top_ps": ("rows",),
        "min_ps": ("rows",),
        "seeds": ("rows",),
        "peaks": ("rows", "chunks"),
        "firsts": ("rows", "chunks"),
        "masses": ("rows", "chunks"),
        "kept": ("rows", "chunks"),
        "bounds": ("rows",),
        "survivors": ("rows", "capacity"),
        "taken": ("rows",),
        "leading": ("rows", "counts"),
        "second": ("rows", "counts"),
        "output": ("rows",),
    },
)

# The op, deterministic given a seed per row (a serving engine's per-request seeds);
# `sample` (aot/runtime/_sampling.py) draws the seeds from torch's generator. A
# parameter's tensor (a value per row) takes the place of its number. The samples are
# greedy (temperature 0, top-k 1): their tokens are exact; tests/gpu/test_sampling.py
# tests the draws by their distribution.
API = Api(
    "(Tensor logits, Tensor seeds, Tensor? temperatures=None, Tensor? top_ks=None, "
    "Tensor? top_ps=None, Tensor? min_ps=None, float temperature=1.0, int top_k=0, "
    "float top_p=1.0, float min_p=0.0)",
    "ntops_prebuilt._sampling_reference.sampling_reference",
    wrapper="_sampling",
    samples=(
        sample(logits=(6, 1000), seeds=(6,), temperature=0.0, indices={"seeds": 1 << 40}),
        sample(logits=(3, 50000), seeds=(3,), top_k=1, top_p=0.5, indices={"seeds": 1 << 40}),
    ),
    doc="A token per row of logits (int64): temperature, top-k, min-p, top-p; seeded.",
)

# 4096 logits a tile (and a chunk) in 8 warps: Llama-3's 128256 in 32 (the row
# normalizations' tile, reduction.NORM_CONFIG). Both steps are built with it: the rows
# step reads the chunks' results by it (aot/runtime/_sampling.py sizes them by it).
# The survivors a row's draw takes top-p over (flag 128): topk's limit of k, 1024, and
# its ties (more: the rejection rounds), 8 KB a row.
CONFIG = Config({"block_size": 4096, "capacity": 1024}, num_warps=8, num_stages=2)
# The shift of the lowest byte of a logit's float32 key (its bits, order-preserving) that
# its dtype can make other than the byte's neighbours: bf16's 16 bits are the key's top
# two bytes; fp16's 1 + 5 + 10 end 13 bits above the bottom (its exponent widened);
# float32's use every byte.
LOWEST_BYTE = {"bf16": 16, "fp16": 8, "fp32": 0}
# The chunks' results a tile of the rows step reads (Gemma's 256000 logits: 63 chunks).
# (The kernels spell both out: module globals are not visible in them.)
RESULTS = 64
INT_MAX = 2147483647


def config(variant):
    return CONFIG


def histograms(tensor):
    """(rows, chunks * 256) -> each program's 256 counts (a chunk of a row)."""
    arranged = tensor.tile((1, 256))
    arranged.dtype = arranged.dtype.squeeze(0)
    return arranged


def arrangement_chunks(logits, temperatures, peaks, firsts, masses, leading, t, rows, block,
                       block_size):  # fmt: skip
    """A program per chunk of a row: one tile of its logits, its row's temperature and
    one element of each result (256 of the histogram)."""
    tiles = chunks.arrange_chunks(logits, block_size, 1)
    temperature = temperatures.tile((1,)).unsqueeze(1).expand((-1, peaks.shape[1]))
    results = (chunks.arrange_results(tensor) for tensor in (peaks, firsts, masses))
    return (tiles, temperature, *results, histograms(leading), t, rows, block)


def application_chunks(logits, temperatures, peaks, firsts, masses, leading, t, rows, block):
    vocabulary = logits.source.shape[1]
    temperature = t
    if rows & 1:
        temperature = ntl.max(temperatures, 0)
    inverse = 1.0 / ntl.where(temperature <= 0.0, 1.0, temperature)
    x = ntl.cast(logits[0], ntl.float32)  # padded with -inf
    index = ntl.cast(logits[0].offsets(-1), ntl.int32)
    nan = (x != x) & (index < vocabulary)
    first_nan = ntl.min(ntl.where(nan, index, 2147483647), 0)
    x = ntl.where(x != x, float("-inf"), x)
    peak = ntl.max(x, 0)
    first = ntl.min(ntl.where(x == peak, index, 2147483647), 0)
    shift = ntl.where(peak == float("-inf"), 0.0, peak)
    mass = ntl.sum(ntl.exp((x - shift) * inverse), 0)
    # A chunk holding NaN: NaN and its first NaN's index (NaN counts as the maximum).
    peaks = ntl.where(first_nan < 2147483647, float("nan"), peak)  # noqa: F841
    firsts = ntl.where(first_nan < 2147483647, first_nan, first)  # noqa: F841
    masses = mass  # noqa: F841
    if rows & 64:  # top-k: the histogram of the keys' first byte (the radix select's)
        digits = ntl.cast((key(ntl.cast(logits[0], ntl.float32)) >> 24) & 255, ntl.int32)
        leading = ntl.histogram(digits, 256, mask=index < vocabulary)  # noqa: F841


def arrangement_digits(logits, top_ks, peaks, leading, second, k, rows, block, block_size):
    """A program per chunk of a row: one tile of its logits, its row's k, every chunk's
    first-byte histogram of the row, and its own second-byte one."""
    count = peaks.shape[1]
    tiles = chunks.arrange_chunks(logits, block_size, 1)
    per_row = top_ks.tile((1,)).unsqueeze(1).expand((-1, count))
    whole = reduction.arrange_rows(leading, 256).expand((-1, count))  # from (rows, 1)
    return (tiles, per_row, chunks.arrange_results(peaks), whole, histograms(second), k, rows,
            block)  # fmt: skip


def application_digits(logits, top_ks, peaks, leading, second, k, rows, block):
    """The radix select's second byte, a chunk at a time: the first byte's bucket of the
    row's k-th largest key from the chunks' histograms, then this chunk's histogram of
    the second byte of its keys inside that bucket."""
    vocabulary = logits.source.shape[1]
    top_k = k
    if rows & 2:
        top_k = ntl.max(top_ks, 0)
    counts = ntl.zeros((256,), dtype=ntl.int32)
    for i in range(leading.shape[0]):
        counts += leading[i]
    chosen, _wanted, _exact = choose(counts, top_k)
    keys = key(ntl.cast(logits[0], ntl.float32))
    index = ntl.cast(logits[0].offsets(-1), ntl.int32)
    inside = ((keys >> 24) == ntl.cast(chosen, ntl.int64)) & (index < vocabulary)
    digits = ntl.cast((keys >> 16) & 255, ntl.int32)
    second = ntl.histogram(digits, 256, mask=inside)  # noqa: F841


def arrangement_bounded(logits, temperatures, bounds, peaks, kept, survivors, taken, t, rows,
                        block, capacity, block_size, slots):  # fmt: skip
    """A program per chunk of a row: one tile of its logits, its row's temperature and
    bound, its chunk's maximum and mass kept; the survivors' buffers through their
    pointers (`slots`: `capacity`'s value)."""
    tiles = chunks.arrange_chunks(logits, block_size, 1)
    per_row = (
        tensor.tile((1,)).unsqueeze(1).expand((-1, peaks.shape[1]))
        for tensor in (temperatures, bounds)
    )
    results = (chunks.arrange_results(tensor) for tensor in (peaks, kept))
    buffers = (survivors.tile((1, 1)), taken.tile((1,)).unsqueeze(1).expand((-1, peaks.shape[1])))
    return (tiles, *per_row, *results, *buffers, t, rows, block, capacity)


def application_bounded(logits, temperatures, bounds, peaks, kept, survivors, taken, t, rows,
                        block, capacity):  # fmt: skip
    """The chunk's mass of logits with keys at least its row's bound (the rows step's
    first launch found it: top-k's k-th key, min-p's floor), relative to the chunk's
    maximum as `masses` is; with flag 128, the logits themselves (`leave_survivors`)."""
    vocabulary = logits.source.shape[1]
    temperature = t
    if rows & 1:
        temperature = ntl.max(temperatures, 0)
    inverse = 1.0 / ntl.where(temperature <= 0.0, 1.0, temperature)
    bound = ntl.max(bounds, 0)
    peak = ntl.max(ntl.max(peaks, 1), 0)
    shift = ntl.where(peak == float("-inf"), 0.0, peak)
    x = ntl.cast(logits[0], ntl.float32)
    index = ntl.cast(logits[0].offsets(-1), ntl.int32)
    inside = (key(x) >= bound) & (index < vocabulary)
    kept = ntl.sum(ntl.where(inside, ntl.exp((x - shift) * inverse), 0.0), 0)  # noqa: F841
    if capacity > 0:  # noqa: SIM102 (a constexpr: the step "survivors" only)
        if ((rows & 128) != 0) & (bound > 0):
            leave_survivors(
                survivors.source.data_ptr(), taken.source.data_ptr(), peaks.source.shape[1],
                survivors.source.stride(0), survivors.source.stride(1),
                taken.source.stride(0), x, index, inside, capacity,
            )  # fmt: skip


def arrangement(logits, temperatures, top_ks, top_ps, min_ps, seeds, peaks, firsts, masses,
                leading, second, bounds, output, survivors, taken, t, k, p, q, rows, block,
                capacity, lowest, block_size, slots):  # fmt: skip
    """A program per row, seeing its logits as tiles of `block_size`, its chunks'
    results as tiles of RESULTS, one value of each per-row tensor and its survivors
    as one tile."""
    per_row = (tensor.tile((1,)) for tensor in (temperatures, top_ks, top_ps, min_ps, seeds))
    arranged = reduction.arrange_rows(logits, block_size)
    results = (reduction.arrange_rows(tensor, RESULTS) for tensor in (peaks, firsts, masses))
    counts = (reduction.arrange_rows(tensor, 256) for tensor in (leading, second))
    ends = (tensor.tile((1,)) for tensor in (bounds, output))
    buffers = (reduction.arrange_rows(survivors, slots), taken.tile((1,)))
    return (arranged, *per_row, *results, *counts, *ends, *buffers, t, k, p, q, rows, block,
            capacity, lowest)  # fmt: skip


@triton.jit
def key(x):
    """Order-preserving int64 keys of float32 values, in [0, 2^32): larger value, larger
    key (-0.0 taken as 0.0, so the two tie as values do). A Triton function: ninetoothed
    inlines Python helpers once, not inside another inlined helper."""
    bits = tl.cast(x + 0.0, tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return tl.cast(ordered, tl.int64) + 2147483648


@triton.jit
def choose(counts, wanted):
    """Of a histogram of 256 buckets of keys (the largest last), the bucket holding the
    `wanted`-th largest, how many are still wanted inside it, and whether it holds
    exactly those (then its least key is the bound)."""
    bins = tl.arange(0, 256)
    above = tl.cumsum(counts, 0, reverse=True) - counts
    chosen = tl.max(tl.where((above < wanted) & (above + counts >= wanted), bins, -1), 0)
    left = wanted - tl.sum(tl.where(bins == chosen, above, 0), 0)
    exact = tl.sum(tl.where(bins == chosen, counts, 0), 0) == left
    return chosen, left, exact


def kth_key(logits, block, vocabulary, prefix, wanted, shift, exact, lowest):
    """The key of the row's k-th largest logit, or the least key of a bucket (keys
    agreeing in their leading bytes) that holds exactly the k-th and every key above it
    down to it: either way, the keys at least it are the k largest and their ties.
    Continued from a state of the radix select (the bytes above `shift` chosen: `prefix`,
    `wanted` keys still wanted inside it, `exact`): (0, k, 24, False) from the start.
    Bytes below `lowest` are not read: the logits' dtype leaves them the same in every
    key of a bucket (bf16's keys are its 16 bits, fp16's its 19 above 13 that are not),
    so their bucket is the k-th's value and its ties, however many."""
    while shift >= lowest and not exact:
        counts = ntl.zeros((256,), dtype=ntl.int32)
        # Two tiles a step, their loads in flight together: one program streams its
        # row alone, latency-bound with a tile's 8-16 KB in flight (H200: top-k 50 at
        # 256 rows 1.06x as fast for bf16, 1.10x for float32). The second is clamped
        # to the last tile and masked off past it.
        last = logits.shape[0] - 1
        for i in range(0, logits.shape[0], 2):
            j = ntl.minimum(i + 1, last)
            keys_i = key(ntl.cast(logits[i], ntl.float32))
            keys_j = key(ntl.cast(logits[j], ntl.float32))
            offsets = ntl.arange(0, block)
            inside = ((keys_i >> (shift + 8)) == prefix) & (
                ntl.cast(i * block, ntl.int32) + offsets < vocabulary
            )
            counts += ntl.histogram(ntl.cast((keys_i >> shift) & 255, ntl.int32), 256, mask=inside)
            inside = ((keys_j >> (shift + 8)) == prefix) & (
                ntl.cast((i + 1) * block, ntl.int32) + offsets < vocabulary
            )
            counts += ntl.histogram(ntl.cast((keys_j >> shift) & 255, ntl.int32), 256, mask=inside)
        chosen, wanted, exact = choose(counts, wanted)
        prefix = prefix * 256 + ntl.cast(chosen, ntl.int64)
        shift -= 8
    return prefix << (shift + 8)


def mass_above(logits, block, vocabulary, bound, top, inverse):
    """The sum of exp((x - top) * inverse) over the row's logits with keys >= bound.
    (One tile a step: four, as kth_key's two, were 0.87-0.92x as fast at batch 1 and
    float32 batch 32 on an H200, 1.07-1.11x bf16 at 32 and 256; docs/measurements.md.)"""
    total = ntl.cast(0.0, ntl.float32)
    for i in range(logits.shape[0]):
        x = ntl.cast(logits[i], ntl.float32)
        kept = (key(x) >= bound) & (
            ntl.cast(i * block, ntl.int32) + ntl.arange(0, block) < vocabulary
        )
        total += ntl.sum(ntl.where(kept, ntl.exp((x - top) * inverse), 0.0), 0)
    return total


def draw(logits, block, vocabulary, bound, top, inverse, target):
    """The first token (in index order) at which the running mass of the tokens with
    keys >= bound passes `target`, and its key; the last such token where rounding
    leaves the target unreached."""
    running = ntl.cast(0.0, ntl.float32)
    token = ntl.cast(-1, ntl.int32)
    last = ntl.cast(-1, ntl.int32)
    i = 0
    while i < logits.shape[0] and token < 0:
        x = ntl.cast(logits[i], ntl.float32)
        index = ntl.cast(i * block, ntl.int32) + ntl.arange(0, block)
        p = ntl.where((key(x) >= bound) & (index < vocabulary), ntl.exp((x - top) * inverse), 0.0)
        last = ntl.maximum(last, ntl.max(ntl.where(p > 0, index, -1), 0))
        tile = ntl.sum(p, 0)
        if running + tile > target:
            passed = (ntl.cumsum(p, 0) + running > target) & (p > 0)
            token = ntl.min(ntl.where(passed, index, 2147483647), 0)
        running += tile
        i += 1
    return ntl.where(token < 0, last, token)


def draw_located(logits, block, vocabulary, bound, peaks, masses, top, inverse, target):
    """`draw` where each chunk's mass above `bound` is known (`masses`): the chunk whose
    running mass passes `target` found from them, then the token inside it (one tile
    read)."""
    running = ntl.cast(0.0, ntl.float32)
    chunk = ntl.cast(-1, ntl.int32)
    last = ntl.cast(-1, ntl.int32)
    before = ntl.cast(0.0, ntl.float32)
    for i in range(peaks.shape[0]):
        weight = ntl.where(
            peaks[i] > float("-inf"), masses[i] * ntl.exp((peaks[i] - top) * inverse), 0.0
        )
        index = ntl.cast(i * 64, ntl.int32) + ntl.arange(0, 64)  # RESULTS
        last = ntl.maximum(last, ntl.max(ntl.where(weight > 0, index, -1), 0))
        passed = (ntl.cumsum(weight, 0) + running > target) & (weight > 0)
        at = ntl.min(ntl.where(passed, index, 2147483647), 0)
        mass_before = ntl.sum(ntl.where(index < at, weight, 0.0), 0)
        found = (chunk < 0) & (at < 2147483647)
        before = ntl.where(found, running + mass_before, before)
        chunk = ntl.where(found, at, chunk)
        running += ntl.sum(weight, 0)
    # Rounding may leave the target unreached: the last chunk with mass, the whole of it.
    chunk = ntl.where(chunk < 0, last, chunk)
    tile = chunk  # (a tile's index in a statement of its own)
    x = ntl.cast(logits[tile], ntl.float32)
    index = ntl.cast(chunk * block, ntl.int32) + ntl.arange(0, block)
    p = ntl.where((key(x) >= bound) & (index < vocabulary), ntl.exp((x - top) * inverse), 0.0)
    passed = (ntl.cumsum(p, 0) + before > target) & (p > 0)
    token = ntl.min(ntl.where(passed, index, 2147483647), 0)
    final = ntl.max(ntl.where(p > 0, index, -1), 0)
    return ntl.where(token == 2147483647, final, token)


def value_at(logits, block, token):
    """The logit at `token`, as float32."""
    tile = token // block  # (a constexpr inside a tile's index is not renamed)
    x = ntl.cast(logits[tile], ntl.float32)
    return ntl.sum(ntl.where(ntl.arange(0, block) == token % block, x, 0.0), 0)


@triton.jit
def pack(x, index):
    """A survivor as one int64: the order-preserving int32 of its value (`key` less
    2^31) above 2^31 - 1 - its index, so that the larger value comes first in a
    descending sort, and of equal values the lower index."""
    return ((key(x) - 2147483648) << 32) | tl.cast(2147483647 - index, tl.int64)


@triton.jit
def leave_survivors(survivors, taken, chunks, s_row, s_slot, s_taken, x, index, inside,
                    CAPACITY: tl.constexpr):  # fmt: skip
    """The bounded step's chunk's survivors (`inside`: logits `x` at `index`), packed,
    into its row's buffer: a slot range taken by one atomic on the row's counter (the
    rows step's first launch zeroed it); nothing where the row's survivors pass
    CAPACITY (its draw then takes the rejection rounds, the counter telling it). The
    grid is ninetoothed's over (rows, chunks), row-major."""
    row = tl.program_id(0) // chunks
    count = tl.sum(tl.cast(inside, tl.int32), 0)
    if count > 0:
        # Scalar atomics run once per program and their result reaches every thread.
        base = tl.atomic_add(taken + row * s_taken, tl.cast(count, tl.int64), sem="relaxed")
        if base + count <= CAPACITY:
            slot = base + tl.cast(tl.cumsum(tl.cast(inside, tl.int32), 0) - 1, tl.int64)
            tl.store(survivors + row * s_row + slot * s_slot, pack(x, index), mask=inside)


@triton.jit
def draw_nucleus(packed, count, top, inverse, top_p, seed, CAPACITY: tl.constexpr):
    """A token drawn from the top-p set of a row's `count` survivors (the first slots
    of `packed`), renormalised: sorted by value (ties by index), the set is the tokens
    whose strictly more probable ones hold less than top_p of the survivors' mass (all
    of a value or none), as the rejection rounds take it; the draw is the inverse CDF
    over it in that order, one uniform (Philox, the row's seed, offset 0)."""
    slot = tl.arange(0, CAPACITY)
    valid = slot < count
    lowest = tl.full((CAPACITY,), -9223372036854775807, tl.int64) - 1
    packed = tl.sort(tl.where(valid, packed, lowest), descending=True)
    ordered = tl.cast(packed >> 32, tl.int32)
    x = tl.cast(ordered ^ ((ordered >> 31) & 0x7FFFFFFF), tl.float32, bitcast=True)
    p = tl.where(valid, tl.exp((x - top) * inverse), 0.0)
    share = tl.maximum(top_p, 1e-30) * tl.sum(p, 0)
    # The first of a value's tokens has exactly the strictly more probable ones before it.
    inside = valid & (tl.cumsum(p, 0) - p < share)
    least = tl.min(tl.where(inside, ordered, 2147483647), 0)
    q = tl.where(valid & (ordered >= least), p, 0.0)
    target = tl.rand(seed, tl.full((), 0, tl.int32)) * tl.sum(q, 0)
    passed = (tl.cumsum(q, 0) > target) & (q > 0)
    # Rounding may leave the target unreached: the last token with mass.
    at = tl.min(tl.where(passed, slot, CAPACITY), 0)
    at = tl.where(at == CAPACITY, tl.max(tl.where(q > 0, slot, 0), 0), at)
    chosen = tl.sum(tl.where(slot == at, packed, 0), 0)
    return 2147483647 - tl.cast(chosen & 0xFFFFFFFF, tl.int32)


def application(
    logits, temperatures, top_ks, top_ps, min_ps, seeds, peaks, firsts, masses, leading,
    second, bounds, output, survivors, taken, t, k, p, q, rows, block, capacity, lowest,
):  # fmt: skip
    vocabulary = logits.source.shape[1]
    # `rows`: the parameters given as tensors, a bit each (1 temperature, 2 top-k, 4
    # top-p, 8 min-p); the others are the numbers. (Assigning a parameter would store
    # to it: the row's values take new names.) With a bound, three launches: 16, this
    # step finds each row's bound (0: none) and writes it to `bounds`; the bounded step
    # sums each chunk's mass above it; 32, this step reads it, and `masses` are those.
    # 64: top-k's first two bytes are in the chunks' histograms `leading` and `second`.
    # 128 (with 16 and 32): top-p over the bounded step's survivors, where they fit.
    temperature, top_k, top_p, min_p = t, k, p, q
    if rows & 1:
        temperature = ntl.max(temperatures, 0)
    if rows & 2:
        top_k = ntl.max(top_ks, 0)
    if rows & 4:
        top_p = ntl.max(top_ps, 0)
    if rows & 8:
        min_p = ntl.max(min_ps, 0)
    greedy = (temperature <= 0.0) | (top_k == 1)
    inverse = 1.0 / ntl.where(greedy, 1.0, temperature)
    # 1. the chunks' results merged: the maximum and its first index, NaN counting as
    # the maximum as torch.argmax takes it (a row holding one gives its first NaN's
    # index), and the mass
    top = ntl.cast(float("-inf"), ntl.float32)
    first_nan = ntl.cast(2147483647, ntl.int32)
    for i in range(peaks.shape[0]):
        nan = peaks[i] != peaks[i]
        first_nan = ntl.minimum(first_nan, ntl.min(ntl.where(nan, firsts[i], 2147483647), 0))
        top = ntl.maximum(top, ntl.max(ntl.where(nan, float("-inf"), peaks[i]), 0))
    first = ntl.cast(2147483647, ntl.int32)
    total = ntl.cast(0.0, ntl.float32)
    for i in range(peaks.shape[0]):
        first = ntl.minimum(first, ntl.min(ntl.where(peaks[i] == top, firsts[i], 2147483647), 0))
        weight = masses[i] * ntl.exp((peaks[i] - top) * inverse)
        total += ntl.sum(ntl.where(peaks[i] > float("-inf"), weight, 0.0), 0)
    token = ntl.where(first_nan < 2147483647, first_nan, first)
    live = ~greedy & (first_nan == 2147483647)  # the rows that draw
    bound = ntl.cast(0, ntl.int64)
    if live & ((rows & 32) == 0):
        # 2. the bound of top-k and min-p
        if (top_k > 0) & (top_k < vocabulary):
            # The radix select's state: from the start, or (64) past its first two
            # bytes, whose histograms the chunk steps made.
            prefix = ntl.cast(0, ntl.int64)
            wanted = top_k
            shift = ntl.cast(24, ntl.int32)
            exact = top_k < 0
            if rows & 64:
                counts = ntl.zeros((256,), dtype=ntl.int32)
                for i in range(leading.shape[0]):
                    counts += leading[i]
                chosen, wanted, exact = choose(counts, wanted)
                prefix = ntl.cast(chosen, ntl.int64)
                shift = ntl.cast(16, ntl.int32)
                if not exact:
                    counts = ntl.zeros((256,), dtype=ntl.int32)
                    for i in range(second.shape[0]):
                        counts += second[i]
                    chosen, wanted, exact = choose(counts, wanted)
                    prefix = prefix * 256 + ntl.cast(chosen, ntl.int64)
                    shift = ntl.cast(8, ntl.int32)
            bound = kth_key(logits, block, vocabulary, prefix, wanted, shift, exact, lowest)
        if min_p > 0.0:
            floor = key(top + ntl.log(ntl.minimum(min_p, 1.0)) * temperature)
            bound = ntl.maximum(bound, floor)
    if rows & 16:
        bounds = bound + ntl.zeros((1,), dtype=ntl.int64)
        if capacity > 0:  # noqa: SIM102 (a constexpr: the step "nucleus" only)
            if rows & 128:
                taken = ntl.zeros((1,), dtype=ntl.int64)
    if rows & 32:
        bound = ntl.max(bounds, 0)
    if live & ((rows & 16) == 0):
        # the mass above the bound: the chunks' (found by the bounded step), or a pass
        left = total
        located = (bound == 0) | ((rows & 32) != 0)
        if not located:
            left = mass_above(logits, block, vocabulary, bound, top, inverse)
        # 3. and 4. draws until one is inside top-p (the first, without top-p)
        kept = left
        accepted = False
        round = 0
        random = ntl.max(seeds, 0)
        # A top-p of 0 or less keeps the most probable token alone: it passes.
        share = ntl.maximum(top_p, 1e-30) * kept
        if capacity > 0:  # noqa: SIM102 (a constexpr: the step "nucleus" only)
            if ((rows & 128) != 0) & (top_p < 1.0) & (bound > 0):
                count = ntl.max(taken, 0)
                if (count > 0) & (count <= capacity):
                    token = draw_nucleus(survivors[0], count, top, inverse, top_p, random, capacity)
                    accepted = True
        while not accepted and round < 64:
            target = ntl.rand(random, round) * left
            if located and round == 0:
                token = draw_located(
                    logits, block, vocabulary, bound, peaks, masses, top, inverse, target
                )
            else:
                token = draw(logits, block, vocabulary, bound, top, inverse, target)
            accepted = True
            if top_p < 1.0:
                # (ninetoothed inlines a helper only as a statement's whole value)
                drawn = value_at(logits, block, token)
                drawn = key(drawn)
                left = mass_above(logits, block, vocabulary, drawn + 1, top, inverse)
                accepted = left < share
                bound = drawn + 1
            round += 1
        # At most 64 draws: each rejection leaves about half the mass above, so a
        # top-p set of a 2^-30 share takes about 30; only NaN logits (or odds of
        # 2^-64) leave the loop unaccepted, with the argmax.
        token = ntl.where(accepted & (token >= 0), token, first)
    output = ntl.cast(token, ntl.int64) + ntl.zeros((1,), dtype=ntl.int64)  # noqa: F841


def premake(ndim, dtype, step="rows", block_size=4096, capacity=1024):
    block = Tensor(0, constexpr=True, value=block_size)
    # The lowest byte of a float32 key (kth_key) that holds a bit of the logits' dtype.
    lowest = Tensor(0, constexpr=True, value=LOWEST_BYTE[dtype])
    # The survivors' code is compiled in where `capacity` (a constexpr) is not 0.
    room = Tensor(0, constexpr=True, value=capacity if step in ("survivors", "nucleus") else 0)
    logits = Tensor(2, dtype=dtype, other=float("-inf"))
    if step == "chunks":
        tensors = (
            logits,
            Tensor(1, dtype="fp32"),
            Tensor(2, dtype="fp32"),
            Tensor(2, dtype="i32"),
            Tensor(2, dtype="fp32"),
            Tensor(2, dtype="i32"),
            Tensor(0, dtype="fp32"),
            Tensor(0, dtype="i32"),
            block,
        )
        arrange = functools.partial(arrangement_chunks, block_size=block_size)
        return arrange, application_chunks, tensors
    if step == "digits":
        tensors = (
            logits,
            Tensor(1, dtype="i32"),
            Tensor(2, dtype="fp32"),
            Tensor(2, dtype="i32", other=0),
            Tensor(2, dtype="i32"),
            Tensor(0, dtype="i32"),
            Tensor(0, dtype="i32"),
            block,
        )
        arrange = functools.partial(arrangement_digits, block_size=block_size)
        return arrange, application_digits, tensors
    if step in ("bounded", "survivors"):
        tensors = (
            logits,
            Tensor(1, dtype="fp32"),
            Tensor(1, dtype="i64"),
            Tensor(2, dtype="fp32"),
            Tensor(2, dtype="fp32"),
            Tensor(2, dtype="i64"),
            Tensor(1, dtype="i64"),
            Tensor(0, dtype="fp32"),
            Tensor(0, dtype="i32"),
            block,
            room,
        )
        arrange = functools.partial(arrangement_bounded, block_size=block_size, slots=capacity)
        return arrange, application_bounded, tensors
    tensors = (
        logits,
        Tensor(1, dtype="fp32"),
        Tensor(1, dtype="i32"),
        Tensor(1, dtype="fp32"),
        Tensor(1, dtype="fp32"),
        Tensor(1, dtype="i64"),
        Tensor(2, dtype="fp32", other=float("-inf")),
        Tensor(2, dtype="i32", other=INT_MAX),
        Tensor(2, dtype="fp32", other=0.0),
        Tensor(2, dtype="i32", other=0),
        Tensor(2, dtype="i32", other=0),
        Tensor(1, dtype="i64"),
        Tensor(1, dtype="i64"),
        Tensor(2, dtype="i64", other=0),
        Tensor(1, dtype="i64"),
        Tensor(0, dtype="fp32"),
        Tensor(0, dtype="i32"),
        Tensor(0, dtype="fp32"),
        Tensor(0, dtype="fp32"),
        Tensor(0, dtype="i32"),
        block,
        room,
        lowest,
    )
    arrange = functools.partial(arrangement, block_size=block_size, slots=capacity)
    return arrange, application, tensors
