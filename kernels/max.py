"""max and argmax over the last dim of 2-dim rows: each row's largest value and the
index of its first occurrence, NaN the largest of all (the first NaN's index), as
torch's CUDA kernels give them. The runtime (aot/runtime/_max.py) moves the reduced
dim last and merges the others into rows; `max(input)` and `argmax(input)` are one
row of the whole tensor.

A program reduces one chunk of a row (kernels/_lib/chunks.py): a row of up to one
chunk in one launch, its value and index the row's; a longer row (a vocabulary of
logits) leaves a value and index per chunk, and a second launch of the same kernel
reduces those with `gather` set, its positions then read from the chunks' indices
rather than counted. Each lane of a tile keeps its largest value and the tile it was
first seen in (a strictly larger value, or a first NaN, replaces it; tiles come in
order), and the lanes are reduced once, at the end: the least index of the lanes
holding the maximum, or a NaN where any lane holds one.

Where the runtime reduces a leading dim the rows lie side by side (stride 1 along dim
0): the kernels of layout "columns" read a block of rows a program, along that dim,
each lane of a (rows, block_size) tile kept as above and reduced along the tile's dim 1.
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
    switches={"layout": ("rows", "columns")},
    coalesce="none",
    outputs=("values", "indices"),
    # Positions are a stride-0 stand-in until a second launch gathers; each program
    # writes one value and one index: nothing to vectorise in either.
    unspecialized=("positions", "values", "indices"),
    dims={
        "input": ("rows", "columns"),
        "positions": ("rows", "columns"),
        "values": ("rows", "chunks"),
        "indices": ("rows", "chunks"),
    },
)

API = (
    Api(
        "(Tensor input, int? dim=None, bool keepdim=False, *, Tensor? out=None)",
        "torch.max",
        wrapper="_max",
        returns="(Tensor, Tensor)",
        samples=(
            sample(input=(6, 42, 123)),
            sample(input=(6, 42, 123), dim=-1),
            sample(input=(6, 42, 123), dim=1, keepdim=True),
            sample(input=(6, 42, 123), dim=0),
            sample(input=(3, 5000), dim=1),
            sample(input=(37,), dim=0),
            sample(input=(1100, 70), dim=0),  # rows side by side (layout "columns")
        ),
        doc="torch.max: the largest element, or (values, indices) along `dim`.",
    ),
    Api(
        "(Tensor input, int? dim=None, bool keepdim=False)",
        "torch.argmax",
        name="argmax",
        wrapper="_max",
        samples=(
            sample(input=(6, 42, 123)),
            sample(input=(6, 42, 123), dim=-1),
            sample(input=(6, 42, 123), dim=1, keepdim=True),
            sample(input=(4, 9000), dim=1),
            sample(input=(1100, 70), dim=0),
        ),
        doc="torch.argmax: the index of the first largest element (NaN the largest).",
    ),
)

# Chunks of 8192 elements, eight tiles of 1024 in 4 warps: a vocabulary of 128256 logits
# in 16 programs a row, then one over their 16 results; a chunk past a row's end reads
# only the row's tiles. The first kernel had one tile of 4096 a chunk in 8 warps: past
# 64 rows the programs' count, not the bytes, set the time. A sweep of the chunk's shape
# (standalone Triton of this application, H100, CUDA graphs, argmax of bf16 (1 / 8 / 64
# / 256, 128256) and of a whole (4096, 4096); .device script, not in the repository):
# one tile of 4096 4.2 / 4.7 / 13.9 / 46.8 / 25.3 us, 8 x 1024 with the lanes reduced
# through one key 4.5 / 4.8 / 9.2 / 31.1 / 16.3 (three reductions: 5.3 / 5.3 / 9.9 / 31.8
# / 17.2), 4 x 4096 in 8 warps 5.1 / 5.2 / 9.8 / 34.5 / 17.4, 8 x 4096 7.5 / 7.7 / 9.9 /
# 33.5 / 15.6, 4 x 2048 in 4 warps 4.5 / 4.8 / 9.8 / 33.8 / 17.5; torch 26.6 / 26.9 /
# 27.4 / 47.0 / 26.9. The wheel's kernels before and after, in one run (H100,
# bench_reductions.py, us, torch in brackets): argmax of bf16 (1, 128256) 5.3 -> 6.3
# (26.5), (64, 128256) 17.4 -> 11.3 (27.4), (256, 128256) 59.9 -> 35.4 (47.0), fp32
# (256, 128256) 62.7 -> 52.3 (54.4), a whole bf16 (4096, 4096) 31.3 -> 19.9 (26.7). The
# tiles unrolled in place of the loop: 0.3-1.2 us slower at 1 to 256 rows, 1.4 faster
# on a whole tensor.
CONFIG = Config({"block_size": 1024, "blocks": 8}, num_warps=4, num_stages=3)
# Layout "columns": kernels/sums.py's (blocks of 64 rows, chunks of 256 of their
# elements). H100, argmax of a bf16 (4096, 4096) along dim 0: 40.1 us, torch 57.1.
COLUMNS = Config({"rows": 64, "block_size": 64, "blocks": 4}, num_warps=4, num_stages=3)


def arrangement(input, positions, gather, values, indices, block_size=1024, blocks=8):
    rows = functools.partial(chunks.arrange_chunks, block_size=block_size, blocks=blocks)
    results = chunks.arrange_results
    return rows(input), rows(positions), gather, results(values), results(indices)


def arrangement_columns(
    input, positions, gather, values, indices, rows=64, block_size=64, blocks=4
):
    blocked = functools.partial(
        chunks.arrange_blocks, rows=rows, block_size=block_size, blocks=blocks
    )
    results = functools.partial(chunks.arrange_block_results, rows=rows)
    return blocked(input), blocked(positions), gather, results(values), results(indices)


def application(input, positions, gather, values, indices):
    n = input.source.shape[-1]
    size = input.dtype.shape[0]
    # The chunk's first element, and its tiles that hold some of the row: a row shorter
    # than a chunk (a hidden size) reads only those.
    start = ntl.min(input[0].offsets(-1), 0)
    tiles = ntl.cast(ntl.minimum((n - start + size - 1) // size, input.shape[0]), ntl.int32)
    best = ntl.full(input.dtype.shape, float("-inf"), ntl.float32)
    tile = ntl.full(input.dtype.shape, -1, ntl.int32)  # where each lane's best was: -1 none
    for i in range(tiles):
        x = ntl.cast(input[i], ntl.float32)
        larger = (x > best) | ((x != x) & (best == best)) | (tile < 0)
        take = (input[i].offsets(-1) < n) & larger
        best = ntl.where(take, x, best)
        tile = ntl.where(take, i, tile)
    # Positions within the chunk, in int32 (the chunk's first element its 0).
    local = tile * size + ntl.cast(input[0].offsets(-1) - start, ntl.int32)
    # The lanes reduced once, through an int64 key a lane: above, its best as an int32
    # that orders as the floats do (NaN made positive: the largest; -0.0 made +0.0, equal
    # to it), below, its position subtracted from 2^31 - 1 (a lane that took nothing,
    # the least), so the largest key is the first occurrence of the largest value.
    canonical = ntl.where(best != best, float("nan"), best + 0.0)
    bits = ntl.cast(canonical, ntl.int32, bitcast=True)
    ordered = ntl.where(bits >= 0, bits, bits ^ 2147483647)
    below = 2147483647 - ntl.where(tile >= 0, local, 2147483647)
    top = ntl.max((ntl.cast(ordered, ntl.int64) << 32) | ntl.cast(below, ntl.int64), 0)
    first = 2147483647 - ntl.cast(top & 2147483647, ntl.int32)
    above = ntl.cast(top >> 32, ntl.int32)
    value = ntl.cast(ntl.where(above >= 0, above, above ^ 2147483647), ntl.float32, bitcast=True)
    if value == 0.0:  # +0.0 or -0.0: torch gives the one at the index it gives
        value = ntl.max(ntl.where(local == first, best, float("-inf")), 0)
    index = ntl.cast(start, ntl.int64) + first
    if gather != 0:  # the index the chunk's result at `first` came with
        index = ntl.cast(-1, ntl.int64)
        for i in range(tiles):
            at = input[i].offsets(-1) - start == first
            index = ntl.maximum(index, ntl.max(ntl.where(at, positions[i], -1), 0))
    values = value  # noqa: F841
    indices = index  # noqa: F841


def application_columns(input, positions, gather, values, indices):
    """`application` over a block of rows, each tile (rows, block_size) reduced along
    its dim 1: each lane's largest value and the tile it was first seen in, then per
    row the least position of the lanes holding the maximum (or a NaN)."""
    n = input.source.shape[-1]
    best = ntl.full(input.dtype.shape, float("-inf"), ntl.float32)
    tile = ntl.full(input.dtype.shape, -1, ntl.int32)
    for i in range(input.shape[0]):
        x = ntl.cast(input[i], ntl.float32)
        larger = (x > best) | ((x != x) & (best == best)) | (tile < 0)
        take = (input[i].offsets(-1) < n) & larger
        best = ntl.where(take, x, best)
        tile = ntl.where(take, i, tile)
    nan = ntl.max(ntl.where(best != best, 1, 0), 1) != 0
    largest = ntl.expand_dims(ntl.max(best, 1), 1)
    hit = ntl.where(ntl.expand_dims(nan, 1), best != best, best == largest) & (tile >= 0)
    # A tile's offsets along dim 1 (block_size,), broadcast over its rows.
    start = ntl.min(input[0].offsets(-1), 0)
    lane = ntl.cast(input[0].offsets(-1) - start, ntl.int32)
    local = tile * input.dtype.shape[1] + lane
    first = ntl.min(ntl.where(hit, local, 2147483647), 1)
    chosen = local == ntl.expand_dims(first, 1)
    value = ntl.max(ntl.where(chosen, best, float("-inf")), 1)
    index = ntl.cast(start, ntl.int64) + first
    if gather != 0:
        index = ntl.max(ntl.full(input.dtype.shape, -1, ntl.int64), 1)
        for i in range(input.shape[0]):
            at = (i * input.dtype.shape[1] + lane) == ntl.expand_dims(first, 1)
            index = ntl.maximum(index, ntl.max(ntl.where(at, positions[i], -1), 1))
    values = ntl.where(nan, float("nan"), value)  # noqa: F841
    indices = index  # noqa: F841


def config(variant):
    return COLUMNS if dict(variant.switches)["layout"] == "columns" else CONFIG


def unit_dims(variant):
    """Layout "columns" reads its rows side by side: stride 1 along dim 0."""
    return {"input": (0,)} if dict(variant.switches)["layout"] == "columns" else {}


def premake(ndim, dtype, layout="rows", block_size=1024, blocks=8, rows=64):
    tensors = (
        Tensor(ndim, dtype=dtype, other=float("-inf")),
        Tensor(ndim, dtype=ninetoothed.int64, other=0),
        Tensor(0, dtype=ninetoothed.int64),
        Tensor(ndim, dtype=dtype),
        Tensor(ndim, dtype=ninetoothed.int64),
    )
    if layout == "columns":
        arrange = functools.partial(
            arrangement_columns, rows=rows, block_size=block_size, blocks=blocks
        )
        return arrange, application_columns, tensors
    arrange = functools.partial(arrangement, block_size=block_size, blocks=blocks)
    return arrange, application, tensors
