"""bincount: output[v] += weight (or 1) for each value v of a 1-D integer input
(torch.bincount), by atomic adds into an output the runtime zeroes; the count of a
value's occurrences is int64, a sum of float32 weights float32, of float64 ones float64
(torch converts other weights to float64, and so does the runtime).

The output's length, max(max(input) + 1, minlength), depends on the values: each
program also folds its block's least and largest values into `extrema` (two int64,
zeroed: min(0, ...) and max(0, ...)) by atomic min and max, and bins outside the
output are skipped, never written. The runtime (aot/runtime/_bincount.py) reads
`extrema` once (torch reads the minimum and the maximum, two synchronisations), and
where a value lies past the output it was given (minlength) launches again into one
of the length the maximum asks; a negative value is refused there, as torch refuses it.

int32 and int64 inputs have kernels; int8, int16 and uint8 ones are converted to
int32 by the runtime (a copy of a narrow tensor), as their values fit.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Config, VariantSpace

SPACE = VariantSpace(
    dtypes=("i32", "i64"),
    ndims=(1,),
    # none: counts (int64); fp32 and fp64: sums of weights of that dtype.
    switches={"weights": ("none", "fp32", "fp64")},
    coalesce="none",
    outputs=("extrema", "output"),
    # Read once each, a block a program, or written through pointers: unit strides and
    # alignment would buy nothing the atomics do not cost many times over.
    specs=("generic", "wide"),
    dims={"input": ("values",), "weights": ("values",), "extrema": ("two=2",)},
)

API = Api(
    "(Tensor input, Tensor? weights=None, int minlength=0)",
    "torch.bincount",
    wrapper="_bincount",
    samples=(
        sample(input=(1000,), indices={"input": 64}),
        sample(input=(4096,), minlength=64, indices={"input": 64}),
        sample(
            input=(37,), weights=(37,), minlength=5, indices={"input": 50}, float32=("weights",)
        ),
        sample(input=(3000,), weights=(3000,), indices={"input": 700}, float32=("weights",)),
    ),
    doc="torch.bincount: occurrences (or summed weights) of each value of a 1-D "
    "non-negative integer tensor; reads the input's maximum back once (torch twice).",
)

# 1024 values a program in 4 warps: a block's extrema are two atomics a program, its
# counts one atomic a value (not measured on a GPU yet).
CONFIG = Config({"block_size": 1024}, num_warps=4, num_stages=1)


def arrangement(input, *rest, block_size=1024):
    """One program per block of values; the output and the extrema are written through
    their pointers (tiled only so that ninetoothed sees tiles)."""
    *weights, extrema, output = rest
    values = tuple(tensor.tile((block_size,)) for tensor in (input, *weights))
    return (*values, extrema.tile((1,)), output.tile((1,)))


def scatter(input, weight, extrema, output):
    """Add `weight` (a scalar or a block) into the bins of the block's values, and fold
    their least and largest into `extrema`. Inlined into each application."""
    valid = input.offsets(0) < input.source.shape[0]
    value = ntl.where(valid, ntl.cast(input, ntl.int64), 0)
    inside = valid & (value >= 0) & (value < output.source.shape[0])
    bins = output.source.data_ptr() + ntl.where(inside, value, 0) * output.source.stride(0)
    ntl.atomic_add(bins, weight, mask=inside, sem="relaxed")
    least = extrema.source.data_ptr()
    ntl.atomic_min(least, ntl.min(value, 0), sem="relaxed")
    ntl.atomic_max(least + extrema.source.stride(0), ntl.max(value, 0), sem="relaxed")


def application(input, extrema, output):
    scatter(input, 1, extrema, output)


def application_weights(input, weights, extrema, output):
    scatter(input, weights, extrema, output)


def config(variant):
    return CONFIG


def premake(ndim, dtype, weights="none", block_size=1024):
    input = Tensor(ndim, dtype=dtype, other=0)
    extrema = Tensor(1, dtype=ninetoothed.int64)
    if weights == "none":
        output = Tensor(1, dtype=ninetoothed.int64)
        arrange = functools.partial(arrangement, block_size=block_size)
        return arrange, application, (input, extrema, output)
    kind = {"fp32": ninetoothed.float32, "fp64": ninetoothed.float64}[weights]
    tensors = (input, Tensor(ndim, dtype=kind, other=0), extrema, Tensor(1, dtype=kind))
    return functools.partial(arrangement, block_size=block_size), application_weights, tensors
