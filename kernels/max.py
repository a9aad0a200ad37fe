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

# A chunk of 4096: a model's hidden size in one launch, a vocabulary of 128256 logits in
# 32 programs a row, then one over their 32 results. H200, CUDA graphs
# (tests/benchmarks/bench_reductions.py), argmax of bf16 (batch, 128256), ours / torch
# us: batch 1 5.3 / 26.7, 8 6.5 / 26.9, 64 23.5 / 27.2, 256 83 / 46.5 (fp32 alike): past
# 64 rows the programs' count, not the bytes, sets the time (94 registers a thread,
# two programs a multiprocessor). That kernel kept an int64 index a lane; with the
# int32 positions that replaced it (H100): batch 1 6.2 / 26.6, 8 7.2 / 27.4, 64 21.6 /
# 27.3, 256 75.8 / 46.9.
CONFIG = Config({"block_size": 4096, "blocks": 1}, num_warps=8, num_stages=2)
# Layout "columns": kernels/sums.py's (blocks of 64 rows, chunks of 256 of their
# elements). H100, argmax of a bf16 (4096, 4096) along dim 0: 40.1 us, torch 57.1.
COLUMNS = Config({"rows": 64, "block_size": 64, "blocks": 4}, num_warps=4, num_stages=3)


def arrangement(input, positions, gather, values, indices, block_size=4096, blocks=1):
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
    best = ntl.full(input.dtype.shape, float("-inf"), ntl.float32)
    tile = ntl.full(input.dtype.shape, -1, ntl.int32)  # where each lane's best was: -1 none
    for i in range(input.shape[0]):
        x = ntl.cast(input[i], ntl.float32)
        larger = (x > best) | ((x != x) & (best == best)) | (tile < 0)
        take = (input[i].offsets(-1) < n) & larger
        best = ntl.where(take, x, best)
        tile = ntl.where(take, i, tile)
    nan = ntl.max(ntl.where(best != best, 1, 0), 0) != 0
    hit = ntl.where(nan, best != best, best == ntl.max(best, 0)) & (tile >= 0)
    # Positions within the chunk, in int32 (the chunk's first element its 0): the least
    # of the lanes holding the maximum.
    start = ntl.min(input[0].offsets(-1), 0)
    local = tile * input.dtype.shape[0] + ntl.cast(input[0].offsets(-1) - start, ntl.int32)
    first = ntl.min(ntl.where(hit, local, 2147483647), 0)
    # The value of the lane chosen: +0.0 and -0.0 compare equal, and torch gives the one
    # at the index it gives.
    value = ntl.max(ntl.where(local == first, best, float("-inf")), 0)
    index = ntl.cast(start, ntl.int64) + first
    if gather != 0:  # the index the chunk's result at `first` came with
        index = ntl.cast(-1, ntl.int64)
        for i in range(input.shape[0]):
            at = input[i].offsets(-1) - start == first
            index = ntl.maximum(index, ntl.max(ntl.where(at, positions[i], -1), 0))
    values = ntl.where(nan, float("nan"), value)  # noqa: F841
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


def premake(ndim, dtype, layout="rows", block_size=4096, blocks=1, rows=64):
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
