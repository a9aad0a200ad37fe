"""sampling: a token per row of logits, as a serving loop's sampling step draws it:
temperature, then top-k, min-p and top-p filters, then a draw from what is left
renormalised; temperature 0 (or top-k 1) takes the argmax. Every parameter is a number
for the whole batch or a tensor with a value per row (aot/runtime/_sampling.py).

Without sorting, one program per row:
1. one pass: the row's maximum, its first index (greedy rows stop here) and the sum of
   exp((x - max) / temperature) (online, as softmax's first pass);
2. top-k: the k-th largest logit by a radix select over order-preserving keys of the
   values (a histogram of 8 bits a pass, from the top: 2 passes for bf16 logits, at
   most 4 for fp32; it stops as soon as a bucket holds exactly the rows still wanted).
   Ties with the k-th value are all kept. min-p raises the same bound to
   max + temperature * log(min_p). The tokens left are those with a key at least the
   bound; a pass sums their mass when the bound moved;
3. the draw: a uniform times that mass, found by scanning the tiles' sums until the
   running sum passes it, then a cumulative sum inside that tile (inverse CDF, one
   uniform a round from Philox keyed by the row's seed);
4. top-p, by rejection as FlashInfer's sampler does it: the drawn token is kept when the
   tokens strictly more probable than it hold less than top_p of the mass left after
   top-k (one pass); else the bound rises past its value and the draw repeats over what
   is above, which holds the whole top-p set, so the accepted token is distributed as
   the renormalised top-p set is, exactly. The argmax always passes: the loop ends.
"""

import functools

import ninetoothed.language as ntl
import triton
import triton.language as tl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

from ._lib import reduction

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2,),
    coalesce="none",
    # The per-row parameters may be one value broadcast (stride 0) or unused views.
    unspecialized=("temperature", "top_k", "top_p", "min_p"),
    dims={
        "logits": ("rows", "vocabulary"),
        "temperatures": ("rows",),
        "top_ks": ("rows",),
        "top_ps": ("rows",),
        "min_ps": ("rows",),
        "seeds": ("rows",),
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

# 4096 logits a tile in 8 warps: Llama-3's 128256 in 32 tiles (the row normalizations'
# tile, reduction.NORM_CONFIG).
CONFIG = Config({"block_size": 4096}, num_warps=8, num_stages=2)


def config(variant):
    return CONFIG


def arrangement(logits, temperatures, top_ks, top_ps, min_ps, seeds, output, t, k, p, q, rows,
                block, block_size):  # fmt: skip
    """A program per row, seeing its logits as tiles of `block_size` and one value of
    each per-row tensor."""
    per_row = (tensor.tile((1,)) for tensor in (temperatures, top_ks, top_ps, min_ps, seeds))
    arranged = reduction.arrange_rows(logits, block_size)
    return (arranged, *per_row, output.tile((1,)), t, k, p, q, rows, block)


@triton.jit
def key(x):
    """Order-preserving int64 keys of float32 values, in [0, 2^32): larger value, larger
    key (-0.0 taken as 0.0, so the two tie as values do). A Triton function: ninetoothed
    inlines Python helpers once, not inside another inlined helper."""
    bits = tl.cast(x + 0.0, tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return tl.cast(ordered, tl.int64) + 2147483648


def kth_key(logits, block, vocabulary, k):
    """The key of the row's k-th largest logit, or the least key of a bucket (keys
    agreeing in their leading bytes) that holds exactly the k-th and every key above it
    down to it: either way, the keys at least it are the k largest and their ties."""
    bins = ntl.arange(0, 256)
    prefix = ntl.cast(0, ntl.int64)
    wanted = k
    shift = 24
    exact = False
    while shift >= 0 and not exact:
        counts = ntl.zeros((256,), dtype=ntl.int32)
        for i in range(logits.shape[0]):
            keys = key(ntl.cast(logits[i], ntl.float32))
            inside = ((keys >> (shift + 8)) == prefix) & (
                ntl.cast(i * block, ntl.int32) + ntl.arange(0, block) < vocabulary
            )
            digits = ntl.cast((keys >> shift) & 255, ntl.int32)
            counts += ntl.histogram(digits, 256, mask=inside)
        above = ntl.cumsum(counts, 0, reverse=True) - counts
        chosen = ntl.max(ntl.where((above < wanted) & (above + counts >= wanted), bins, -1), 0)
        wanted -= ntl.sum(ntl.where(bins == chosen, above, 0), 0)
        exact = ntl.sum(ntl.where(bins == chosen, counts, 0), 0) == wanted
        prefix = prefix * 256 + ntl.cast(chosen, ntl.int64)
        shift -= 8
    return prefix << (shift + 8)


def mass_above(logits, block, vocabulary, bound, top, inverse):
    """The sum of exp((x - top) * inverse) over the row's logits with keys >= bound."""
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


def value_at(logits, block, token):
    """The logit at `token`, as float32."""
    tile = token // block  # (a constexpr inside a tile's index is not renamed)
    x = ntl.cast(logits[tile], ntl.float32)
    return ntl.sum(ntl.where(ntl.arange(0, block) == token % block, x, 0.0), 0)


def application(
    logits, temperatures, top_ks, top_ps, min_ps, seeds, output, t, k, p, q, rows, block
):  # fmt: skip
    vocabulary = logits.source.shape[1]
    # `rows`: the parameters given as tensors, a bit each (1 temperature, 2 top-k, 4
    # top-p, 8 min-p); the others are the numbers. (Assigning a parameter would store
    # to it: the row's values take new names.)
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
    # 1. maximum, its first index, and the mass (online); NaN counts as the maximum,
    # as torch.argmax takes it: a row holding one gives its first NaN's index.
    top = ntl.cast(float("-inf"), ntl.float32)
    first = ntl.cast(0, ntl.int32)
    first_nan = ntl.cast(2147483647, ntl.int32)
    total = ntl.cast(0.0, ntl.float32)
    for i in range(logits.shape[0]):
        x = ntl.cast(logits[i], ntl.float32)
        index = ntl.cast(i * block, ntl.int32) + ntl.arange(0, block)
        first_nan = ntl.minimum(first_nan, ntl.min(ntl.where(x != x, index, 2147483647), 0))
        x = ntl.where(x != x, float("-inf"), x)
        tile_max = ntl.max(x, 0)
        at = ntl.min(ntl.where(x == tile_max, index, 2147483647), 0)
        first = ntl.where(tile_max > top, at, first)
        new_top = ntl.maximum(top, tile_max)
        shift = ntl.where(new_top == float("-inf"), 0.0, new_top)
        exps = ntl.sum(ntl.exp((x - shift) * inverse), 0)
        total = total * ntl.exp((top - shift) * inverse) + exps
        top = new_top
    token = ntl.where(first_nan < 2147483647, first_nan, first)
    if not greedy and first_nan == 2147483647:
        # 2. the bound of top-k and min-p, and the mass above it
        bound = ntl.cast(0, ntl.int64)
        if (top_k > 0) & (top_k < vocabulary):
            bound = kth_key(logits, block, vocabulary, top_k)
        if min_p > 0.0:
            floor = key(top + ntl.log(ntl.minimum(min_p, 1.0)) * temperature)
            bound = ntl.maximum(bound, floor)
        left = total
        if bound > 0:
            left = mass_above(logits, block, vocabulary, bound, top, inverse)
        # 3. and 4. draws until one is inside top-p (the first, without top-p)
        kept = left
        accepted = False
        round = 0
        random = ntl.max(seeds, 0)
        # A top-p of 0 or less keeps the most probable token alone: it passes.
        share = ntl.maximum(top_p, 1e-30) * kept
        while not accepted and round < 64:
            target = ntl.rand(random, round) * left
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


def premake(ndim, dtype, block_size=4096):
    tensors = (
        Tensor(2, dtype=dtype, other=float("-inf")),
        Tensor(1, dtype="fp32"),
        Tensor(1, dtype="i32"),
        Tensor(1, dtype="fp32"),
        Tensor(1, dtype="fp32"),
        Tensor(1, dtype="i64"),
        Tensor(1, dtype="i64"),
        Tensor(0, dtype="fp32"),
        Tensor(0, dtype="i32"),
        Tensor(0, dtype="fp32"),
        Tensor(0, dtype="fp32"),
        Tensor(0, dtype="i32"),
        Tensor(0, constexpr=True, value=block_size),
    )
    arrange = functools.partial(arrangement, block_size=block_size)
    return arrange, application, tensors
