"""mean and logsumexp over the last dim of 2-dim rows, and max's largest value of a whole
tensor, three functions of one kernel: a row's sum times a scale (1 / n: the mean),
its log-sum-exp, or its largest value (NaN the largest; `max(input)`, which wants no
index, as one row), as the constant `function` each call passes says (0, 1, 2; one
branch a launch). The runtime
(aot/runtime/_sums.py) moves the reduced dims last and merges the others into rows.
Where it reduces leading dims the rows lie side by side (stride 1 along dim 0): the
kernels of layout "columns" read a block of rows a program, along that dim, and each
element of a row is summed as the "rows" kernels sum it.

Both compute in fp32 and round once, as torch's CUDA kernels do. A program reduces one
chunk of a row (kernels/_lib/chunks.py): a row of up to one chunk (a model's hidden
size) in one launch; a longer one leaves a result per chunk in fp32 (switch `result`:
half types' "fp32" kernels, which also serve `mean(dtype=torch.float32)` without a
conversion of the input), whose sum, or log-sum-exp, a second launch takes.

log-sum-exp keeps a running maximum and the sum of exp(x - maximum), rescaled as the
maximum grows (online softmax), shifted by 0 where the maximum is infinite, as torch
shifts: rows of -inf give -inf (log 0), a +inf gives +inf, a NaN NaN.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

from ._lib import chunks

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2,),
    switches={"result": ("same", "fp32"), "layout": ("rows", "columns")},
    switch_dtypes={"result": ("fp16", "bf16")},
    coalesce="none",
    # Each program writes one result: nothing to vectorise.
    unspecialized=("output",),
    dims={"input": ("rows", "columns"), "output": ("rows", "chunks")},
)

API = (
    Api(
        "(Tensor input, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None,"
        " Tensor? out=None)",
        "torch.mean",
        name="mean",
        wrapper="_sums",
        samples=(
            # dim=None spelled out: torch 2.4 takes out= with it only (the wheel's oldest)
            sample(input=(6, 42, 123), dim=None),
            sample(input=(6, 42, 123), dim=-1),
            sample(input=(6, 42, 123), dim=[0, 2], keepdim=True),
            sample(input=(6, 42, 123), dim=1),
            sample(input=(3, 20000), dim=1),
            sample(input=(4, 4096), dim=-1, dtype="float32"),
            # leading dims: rows side by side (layout "columns"), 1100 a second launch's
            sample(input=(1100, 70), dim=0),
            sample(input=(20, 3, 50), dim=[0, 1], keepdim=True),
        ),
        doc="torch.mean over all dims or `dim` (an int or several); integer inputs "
        "give float32 (ntops.torch.mean's; torch refuses them).",
    ),
    Api(
        "(Tensor input, int[1] dim, bool keepdim=False, *, Tensor? out=None)",
        "torch.logsumexp",
        name="logsumexp",
        wrapper="_sums",
        samples=(
            sample(input=(6, 42, 123), dim=-1),
            sample(input=(6, 42, 123), dim=[0, 2], keepdim=True),
            sample(input=(6, 42, 123), dim=1),
            sample(input=(3, 20000), dim=1),
            sample(input=(37,), dim=0),
            sample(input=(1100, 70), dim=0),
        ),
        doc="torch.logsumexp over `dim` (an int or several), max-subtracted.",
    ),
)

# Chunks of 8192 elements, four tiles of 2048 in 4 warps: the mean's and the largest
# value's tiles unrolled (the loads of a row shorter than a chunk, a hidden size, past
# its end are masked off), log-sum-exp's looping over the tiles that hold some of the
# row. The first kernel had one tile of 4096 a chunk in 8 warps (a hidden size in one
# launch); two tiles of 4096 looped over, the second of a row of 4096 masked whole, took
# 13.8 us on a bf16 (4096, 4096) (H200; torch 6.7). A sweep of the chunk's shape
# (standalone Triton of the mean, H100, CUDA graphs, mean of bf16 (1, 4096), (256, 4096),
# (4096, 4096), a whole (4096, 4096) and (64, 128256); .device script, not in the
# repository): one tile of 4096 1.7 / 2.0 / 6.8 / 9.6 / 5.8 us, 4 x 2048 2.0 / 2.2 / 8.0
# / 8.0 / 5.7, 2 x 2048 1.7 / 2.0 / 6.5 / 8.6 / 5.4, 8 x 1024 1.7 / 2.1 / 7.3 / 7.8 /
# 5.4; torch 2.5 / 5.5 / 7.2 / 12.3 / 9.3. The wheel's kernels before and after, in one
# run (H100, bench_reductions.py, us, torch in brackets): mean of bf16 (1, 4096) 1.68 ->
# 1.86 (2.37), (4096, 4096) 9.0 -> 8.7 (7.1), a whole (4096, 4096) 12.2 -> 10.2 (12.4);
# log-sum-exp of (1, 128256) 5.3 -> 6.9 (34.4), (64, 128256) 11.9 -> 11.0 (71.4); max of
# a whole (4096, 4096) through max's kernels 31.3 (with the index), through this one
# 13.5 (16.8). Each lane's own running log-sum-exp, its tiles unrolled, took 32.5 on a
# (4096, 4096) (14.4 looping): twice the exponentials.
CONFIG = Config({"block_size": 2048, "blocks": 4}, num_warps=4, num_stages=2)
# Layout "columns": blocks of 64 rows (128 bytes of a half type along dim 0) and chunks
# of 256 of their elements, four tiles of 64; a (4096, 4096) along dim 0 in 64 x 16
# programs, a (65536, 64) in 256. H100, CUDA graphs (bench_reductions.py), ours / torch
# us: mean of a bf16 (4096, 4096) along dim 0 12.7 / 18.4 (the rows kernels 126),
# logsumexp 24.7 / 126.6, fp32 mean 28.9 / 34.4; mean of a (65536, 64) 7.8 / 21.6. No
# other tile tried.
COLUMNS = Config({"rows": 64, "block_size": 64, "blocks": 4}, num_warps=4, num_stages=3)


def arrangement(input, scale, function, output, block_size=2048, blocks=4):
    rows = chunks.arrange_chunks(input, block_size, blocks)
    return rows, scale, function, chunks.arrange_results(output)


def arrangement_columns(input, scale, function, output, rows=64, block_size=64, blocks=4):
    blocked = chunks.arrange_blocks(input, rows, block_size, blocks)
    return blocked, scale, function, chunks.arrange_block_results(output, rows)


def application(input, scale, function, output):
    n = input.source.shape[-1]
    if function == 1:  # log-sum-exp
        # The chunk's tiles that hold some of the row: a row shorter than a chunk (a
        # hidden size) reads only those.
        size = input.dtype.shape[0]
        start = ntl.min(input[0].offsets(-1), 0)
        tiles = ntl.minimum((n - start + size - 1) // size, input.shape[0])
        row_max = ntl.cast(float("-inf"), ntl.float32)
        row_sum = ntl.cast(0.0, ntl.float32)
        for i in range(tiles):
            x = ntl.where(input[i].offsets(-1) < n, ntl.cast(input[i], ntl.float32), float("-inf"))
            new_max = ntl.maximum(row_max, ntl.max(x, 0))
            infinite = (new_max == float("inf")) | (new_max == float("-inf"))
            shift = ntl.where(infinite, 0.0, new_max)
            row_sum = row_sum * ntl.exp(row_max - shift) + ntl.sum(ntl.exp(x - shift), 0)
            row_max = new_max
        output = row_max + ntl.log(row_sum)
    elif function == 2:  # the largest value, NaN the largest (max without indices)
        best = ntl.full(input.dtype.shape, float("-inf"), ntl.float32)
        for i in ntl.static_range(input.shape[0]):
            x = ntl.where(input[i].offsets(-1) < n, ntl.cast(input[i], ntl.float32), float("-inf"))
            best = ntl.where((x > best) | (x != x), x, best)
        nan = ntl.max(ntl.where(best != best, 1, 0), 0) != 0
        output = ntl.where(nan, float("nan"), ntl.max(best, 0))
    else:
        # The chunk's tiles unrolled, so that a program's loads are in flight together
        # (a loop waits for each tile's); tiles past the row's end load nothing.
        total = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
        for i in ntl.static_range(input.shape[0]):
            total += ntl.cast(input[i], ntl.float32)  # padded with 0
        output = ntl.sum(total, 0) * scale  # noqa: F841


def application_columns(input, scale, function, output):
    """`application` over a block of rows, each tile (rows, block_size) reduced along
    its dim 1: the same arithmetic, a running maximum and sum a row (log-sum-exp), or
    the mean (a largest value comes as one row, never here)."""
    if function == 1:
        n = input.source.shape[-1]
        start = ntl.full(input.dtype.shape, float("-inf"), ntl.float32)
        row_max = ntl.max(start, 1)
        row_sum = ntl.sum(ntl.zeros(input.dtype.shape, dtype=ntl.float32), 1)
        for i in range(input.shape[0]):
            x = ntl.where(input[i].offsets(-1) < n, ntl.cast(input[i], ntl.float32), float("-inf"))
            new_max = ntl.maximum(row_max, ntl.max(x, 1))
            infinite = (new_max == float("inf")) | (new_max == float("-inf"))
            shift = ntl.where(infinite, 0.0, new_max)
            terms = ntl.exp(x - ntl.expand_dims(shift, 1))
            row_sum = row_sum * ntl.exp(row_max - shift) + ntl.sum(terms, 1)
            row_max = new_max
        output = row_max + ntl.log(row_sum)
    else:
        total = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
        for i in range(input.shape[0]):
            total += ntl.cast(input[i], ntl.float32)  # padded with 0
        output = ntl.sum(total, 1) * scale  # noqa: F841


def config(variant):
    return COLUMNS if dict(variant.switches)["layout"] == "columns" else CONFIG


def unit_dims(variant):
    """Layout "columns" reads its rows side by side: stride 1 along dim 0."""
    return {"input": (0,)} if dict(variant.switches)["layout"] == "columns" else {}


def premake(ndim, dtype, result="same", layout="rows", block_size=2048, blocks=4, rows=64):
    tensors = (
        Tensor(ndim, dtype=dtype, other=0),
        Tensor(0, dtype=ninetoothed.float32),
        Tensor(0, dtype=ninetoothed.int64),
        Tensor(ndim, dtype=dtype if result == "same" else ninetoothed.float32),
    )
    if layout == "columns":
        arrange = functools.partial(
            arrangement_columns, rows=rows, block_size=block_size, blocks=blocks
        )
        return arrange, application_columns, tensors
    arrange = functools.partial(arrangement, block_size=block_size, blocks=blocks)
    return arrange, application, tensors
