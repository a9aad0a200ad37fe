"""sort, argsort, msort and topk (torch's), on one kernel: the rows of a 2-dim view
(the runtime moves `dim` last and merges the others, aot/runtime/_sort.py), each
sorted or its k first selected, as torch orders floats: -0.0 equal to 0.0, NaN after
+inf, equal elements in index order (stable; `stable=False` gets the same order).

Switch `tile`, by the row's length: "64" and "1024", rows of up to that many elements
sorted whole in registers (_lib/sorting.py's `sort_tile`; 16 rows a program in "64"),
their first k written (all of them for sort, topk's k); "select", topk of longer rows:
a radix select of the k first, gathered into the outputs and sorted there in one tile
of CANDIDATES (`select_row`); "parts", its first pass where the rows are few: a
program per part of 2048 elements selects the part's k first (`select_part`), and the
runtime selects the k first of those with a kernel above. The runtime refuses, naming
the limit, sort of rows past
1024 elements and topk's k past CANDIDATES: they need a merge across tiles, which is
not built.
"""

import functools

import ninetoothed
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

# ninetoothed copies into a kernel the Triton functions of its application's module:
# the helpers and every function they call are imported by name.
from ._lib.sorting import (  # noqa: F401
    gather_candidates,
    key_position,
    kth_key,
    order_key,
    ranked,
    select_part,
    select_row,
    sort_candidates,
    sort_key,
    sort_tile,
)

# tile: (rows a program, elements a row) of the tile sorts, "select"'s (1, elements a
# step of its passes over the row).
TILES = {"64": (16, 64), "1024": (1, 1024), "select": (1, 4096), "parts": (1, 2048)}
# The most elements "select" sorts in its one tile (aot/runtime/_sort.py's; a test keeps
# them equal). A tile of 4096 (sort of rows up to 4096, topk's k up to 4096) compiles
# in 6.9 s where 1024's takes 2.5 (sm_90, one core): 13 s more a build and arch, for
# sizes past what sampling asks (k up to about 1024).
CANDIDATES = 1024

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2,),
    switches={"tile": tuple(TILES)},
    coalesce="none",
    outputs=("values", "indices"),
    dims={"input": ("rows", None), "values": ("rows", None), "indices": ("rows", None)},
    # One kernel a variant: strides passed, not specialised (the tiles sort in registers,
    # their loads a small part; "select" reads long rows, where 16-byte loads may pay:
    # not measured yet, tests/benchmarks/bench_sort.py). No 64-bit kernels: the runtime
    # launches calls past 2^31 elements in slices of rows.
    specs=("generic",),
)

# Samples without ties (domain "distinct"): torch leaves the order of equal elements
# open (its unstable sort's, topk's), the kernels keep index order; tests/ops/sort.py
# compares ties, NaN and signed zeros with torch's stable sort.
_SHAPES = (
    sample(input=(6, 42, 123), domain="distinct"),
    sample(input=(6, 42, 123), dim=0, domain="distinct"),
)
API = (
    Api(
        "(Tensor input, int dim=-1, bool descending=False, bool stable=False, *, Tensor? out=None)",
        "torch.sort",
        wrapper="_sort",
        returns="(Tensor, Tensor)",
        samples=(
            *_SHAPES,
            sample(input=(6, 42, 123), dim=1, descending=True, stable=True, domain="distinct"),
            sample(input=(300, 37), descending=True, domain="distinct"),
            sample(input=(1000,), domain="distinct"),
        ),
        doc="torch.sort, stable: (values, indices) of rows of up to 1024 elements.",
    ),
    Api(
        "(Tensor input, int dim=-1, bool descending=False, bool stable=False)",
        "torch.argsort",
        wrapper="_sort",
        name="argsort",
        samples=(*_SHAPES, sample(input=(5, 1000), dim=-1, descending=True, domain="distinct")),
    ),
    Api(
        "(Tensor input)",
        "torch.msort",
        wrapper="_sort",
        name="msort",
        samples=(sample(input=(123, 42)), sample(input=(37,))),
    ),
    Api(
        "(Tensor input, int k, int dim=-1, bool largest=True, bool sorted=True)",
        "torch.topk",
        wrapper="_sort",
        name="topk",
        returns="(Tensor, Tensor)",
        samples=(
            sample(input=(6, 42, 123), k=5, domain="distinct"),
            sample(input=(6, 42, 123), k=3, dim=0, largest=False, domain="distinct"),
            sample(input=(4, 9000), k=50, domain="distinct"),
            sample(input=(2, 20000), k=1024, largest=False, domain="distinct"),
        ),
        doc="torch.topk: (values, indices), sorted; k up to 1024.",
    ),
)

# Warps by tile: 4 for 16 rows of 64 and for 1024 keys (8 a thread); "select" reads
# its steps of 4096 elements in 8 warps.
CONFIGS = {
    "64": Config(num_warps=4, num_stages=1),
    "1024": Config(num_warps=4, num_stages=1),
    "select": Config(num_warps=8, num_stages=1),
    "parts": Config(num_warps=4, num_stages=1),
}


def config(variant):
    return CONFIGS[dict(variant.switches)["tile"]]


def arrangement(input, values, indices, *rest, rows, size):
    """A program per `rows` rows (the grid: the first tensor's tiles); the kernels read
    the tensors through their pointers and strides."""
    grid = input.tile((rows, size)).tile((1, -1))
    return grid, values.tile((1, 1)), indices.tile((1, 1)), *rest


def arrangement_parts(input, values, indices, *rest, rows, size):
    """A program per part of `size` elements of each row (the grid: rows x cdiv(n,
    size)); the kernel reads the tensors through their pointers and strides."""
    return input.tile((rows, size)), values.tile((1, 1)), indices.tile((1, 1)), *rest


def application_tile(input, values, indices, descending, tile_rows, tile_size, candidates):
    sort_tile(
        input.source.data_ptr(), values.source.data_ptr(), indices.source.data_ptr(),
        input.source.shape[0], input.source.shape[1], values.source.shape[1],
        input.source.stride(0), input.source.stride(1), values.source.stride(0),
        values.source.stride(1), indices.source.stride(0), indices.source.stride(1),
        descending, tile_rows, tile_size,
    )  # fmt: skip


def application_select(input, values, indices, descending, tile_rows, tile_size, candidates):
    select_row(
        input.source.data_ptr(), values.source.data_ptr(), indices.source.data_ptr(),
        input.source.shape[1], values.source.shape[1], input.source.stride(0),
        input.source.stride(1), values.source.stride(0), values.source.stride(1),
        indices.source.stride(0), indices.source.stride(1), descending, tile_size, candidates,
    )  # fmt: skip


def application_parts(
    input, values, indices, descending, size, tile_rows, tile_size, candidates
):  # fmt: skip
    select_part(
        input.source.data_ptr(), values.source.data_ptr(), indices.source.data_ptr(),
        input.source.shape[1], values.source.shape[1], input.source.stride(0),
        input.source.stride(1), values.source.stride(0), values.source.stride(1),
        indices.source.stride(0), indices.source.stride(1), descending, size, tile_size,
    )  # fmt: skip


def premake(ndim, dtype, tile="1024"):
    rows, size = TILES[tile]
    # input, values, indices, descending; "parts" takes its parts' size too.
    scalars = 2 if tile == "parts" else 1
    tensors = (
        Tensor(ndim, dtype=dtype),
        Tensor(ndim, dtype=dtype),
        Tensor(ndim, dtype=ninetoothed.int64),
        *(Tensor(0, dtype=ninetoothed.int32) for _ in range(scalars)),
        Tensor(0, constexpr=True, value=rows),
        Tensor(0, constexpr=True, value=size),
        Tensor(0, constexpr=True, value=CANDIDATES),
    )
    if tile == "parts":
        arranged, application = arrangement_parts, application_parts
    else:
        arranged = arrangement
        application = application_select if tile == "select" else application_tile
    return functools.partial(arranged, rows=rows, size=size), application, tensors
