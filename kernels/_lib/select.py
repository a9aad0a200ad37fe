"""Radix selection over rows (median, quantile): the element of a given rank of each row,
without a sort, for any row length (torch's CUDA median selects so too).

Each element has a key whose unsigned order is the floats' (torch's radix keys: -0.0
before +0.0); the key of rank k is found four bits at a time, from the top: a pass over
the row counts, by their next four bits (`tl.histogram`), the elements whose keys match
the bits found so far, which picks those four bits: 8 passes for float32, 4 for half
types. Rows are padded with +inf (`Tensor(other=inf)`), which is at least every element:
the rank-k key of the padded row is the row's. NaN is the callers' to handle (`has_nan`):
torch's median and quantile are NaN where a row holds one.

The Python helpers are inlined into an application by ninetoothed, which asks of them:
calls in statements of their own (it drops the statements of one inlined inside another
call's arguments), one return, at the end, and literals for constants (it copies no
module constants into a kernel). `key_of` and `float_of` are Triton functions, called
rather than inlined: ninetoothed numbers an inlined helper's names afresh inside each
helper, so one inlined two levels deep (in `select`'s loops) took names its caller's
caller had used (a loop-carried tuple, which Triton refused). A kernel file imports
them by name: ninetoothed copies into a kernel the Triton functions of its
application's module.
"""

import ninetoothed.language as ntl
import triton
import triton.language as tl


@triton.jit
def key_of(x, BITS: tl.constexpr):
    """Radix keys of a block of floats of BITS bits, in int64: the bits of a negative
    float flipped, of a positive one with the sign bit set (torch's)."""
    half: tl.constexpr = (1 << (BITS - 1)) - 1
    if BITS == 16:
        raw = x.to(tl.int16, bitcast=True).to(tl.int64)
    else:
        raw = x.to(tl.int32, bitcast=True).to(tl.int64)
    return (raw ^ ((raw >> (BITS - 1)) & half)) + half + 1


@triton.jit
def float_of(key, BITS: tl.constexpr, KIND: tl.constexpr):
    """The float of dtype KIND whose radix key (`key_of`) is `key`."""
    half: tl.constexpr = (1 << (BITS - 1)) - 1
    ordered = key - half - 1
    raw = ordered ^ ((ordered >> (BITS - 1)) & half)
    if BITS == 16:
        value = raw.to(tl.int16).to(KIND, bitcast=True)
    else:
        value = raw.to(tl.int32).to(KIND, bitcast=True)
    return value


def has_nan(input):
    """Whether the row (tiles of `input`, padded with +inf) holds a NaN."""
    nans = ntl.zeros(input.dtype.shape, dtype=ntl.int32)
    for i in range(input.shape[0]):
        x = ntl.cast(input[i], ntl.float32)  # Triton's interpreter compares bfloat16 as bits
        nans = ntl.maximum(nans, ntl.where(x != x, 1, 0))
    return ntl.max(nans, 0) != 0


def select(input, rank, bits):
    """The key of rank `rank` (int64; 0: the least) of the row, four bits a pass from the
    top: `prefix` holds the bits found, `left` the rank among the keys sharing them."""
    prefix = ntl.cast(0, ntl.int64)
    left = rank
    for step in range(bits // 4):
        shift = bits - 4 - 4 * step
        counts = ntl.zeros((16,), dtype=ntl.int64)
        for i in range(input.shape[0]):
            x = input[i]
            key = key_of(x, bits)
            # The next four bits where the higher ones match the prefix, else past 15.
            digit = (key ^ prefix) >> shift
            found = ntl.histogram(ntl.cast(digit, ntl.int32), 16, mask=digit < 16)
            counts += ntl.cast(found, ntl.int64)
        # The digits whose keys all rank below `left` come first: as many as there are.
        up_to = ntl.cumsum(counts, 0)
        below = up_to <= left
        left = left - ntl.max(ntl.where(below, up_to, 0), 0)
        prefix = prefix | (ntl.sum(ntl.where(below, 1, 0), 0).to(ntl.int64) << shift)
    return prefix


def next_key(input, low, rank, bits):
    """The key of rank `rank` given `low`, the key of a rank at most one less: `low`
    itself where it repeats that far, else the least key above it."""
    within = ntl.zeros(input.dtype.shape, dtype=ntl.int32)
    above = ntl.full(input.dtype.shape, 1 << 40, ntl.int64)  # past every key
    for i in range(input.shape[0]):
        x = input[i]
        key = key_of(x, bits)
        within += ntl.where(key <= low, 1, 0)
        above = ntl.minimum(above, ntl.where(key > low, key, 1 << 40))
    return ntl.where(rank < ntl.sum(ntl.cast(within, ntl.int64), 0), low, ntl.min(above, 0))


def first_index(input, nan, low, bits):
    """The least index whose element equals the float of key `low` (as `==` has it:
    -0.0 and +0.0 are equal, keys `half` and `half + 1`), or is NaN where `nan`."""
    half = (1 << (bits - 1)) - 1
    # Differences from `half`, not `half + 1`: a constant of 2^31 would be uint32.
    zero = (low - half == 0) | (low - half == 1)
    first = ntl.full(input.dtype.shape, 1 << 40, ntl.int64)  # past every index
    for i in range(input.shape[0]):
        x = input[i]
        key = key_of(x, bits)
        wide = ntl.cast(x, ntl.float32)
        equal = (key == low) | (zero & ((key - half == 0) | (key - half == 1)))
        equal = ntl.where(nan, wide != wide, equal)
        at = ntl.cast(input[i].offsets(-1), ntl.int64)  # padding's lie past the row's
        first = ntl.minimum(first, ntl.where(equal, at, 1 << 40))
    return ntl.min(first, 0)
