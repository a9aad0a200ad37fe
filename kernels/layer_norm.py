"""layer_norm over the last dim: (input - mean) * rsqrt(var + eps) [* weight] [+ bias].

Mean and (biased) variance in fp32 from two passes over the row (the second also
corrects the first's mean), a third writes the result. The runtime flattens several
normalized dims into one; weight and bias are each present or not (four kernels),
so none reads a tensor of ones or zeros.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import reduction

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2, 3),
    switches={"weight": ("given", "none"), "bias": ("given", "none")},
    coalesce="leading",
    fixed=("weight", "bias"),
    # The launcher checks weight and bias against the rows' last dim (their length).
    dims={"input": ("columns",), "weight": ("columns",), "bias": ("columns",)},
)

API = Api(
    "(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None,"
    " float eps=1e-05)",
    "torch.nn.functional.layer_norm",
    wrapper="_layer_norm",
    samples=(
        sample(input=(6, 42, 123), normalized_shape=[123], weight=(123,), bias=(123,)),
        sample(input=(6, 42, 123), normalized_shape=[42, 123]),
        sample(input=(6, 42, 123), normalized_shape=[123], bias=(123,)),
    ),
)


def arrangement(input, *rest, block_size=reduction.BLOCK_SIZE):
    rows = reduction.arrange_rows(input, block_size)
    *vectors, eps, output = rest
    vectors = [reduction.arrange_vector(vector, rows, block_size) for vector in vectors]
    return (rows, *vectors, eps, reduction.arrange_rows(output, block_size))


def statistics(input, eps):
    """Mean and rsqrt(variance + eps) of the row, in fp32.

    The corrected two-pass algorithm (Chan, Golub and LeVeque): the second pass sums
    the deviations from the first pass's mean as well as their squares, and that sum
    takes the mean's rounding error back out of both. A constant row then normalizes
    to exactly 0, as it does in torch's Welford kernel; with the rounded mean alone
    it came out as ~1e-5 where eps is small."""
    n = input.source.shape[-1]
    total = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    for i in range(input.shape[0]):
        total += ntl.cast(input[i], ntl.float32)
    mean = ntl.sum(total, 0) / n
    drift = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    squares = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    for i in range(input.shape[0]):
        deviation = ntl.where(input[i].offsets(-1) < n, ntl.cast(input[i], ntl.float32) - mean, 0.0)
        drift += deviation
        squares += deviation * deviation
    correction = ntl.sum(drift, 0) / n
    variance = ntl.maximum(ntl.sum(squares, 0) / n - correction * correction, 0.0)
    return mean + correction, ntl.rsqrt(variance + eps)


def application_weight_bias(input, weight, bias, eps, output):
    mean, scale = statistics(input, eps)
    for i in range(input.shape[0]):
        normalized = (ntl.cast(input[i], ntl.float32) - mean) * scale
        output[i] = normalized * ntl.cast(weight[i], ntl.float32) + ntl.cast(bias[i], ntl.float32)


def application_weight(input, weight, eps, output):
    mean, scale = statistics(input, eps)
    for i in range(input.shape[0]):
        normalized = (ntl.cast(input[i], ntl.float32) - mean) * scale
        output[i] = normalized * ntl.cast(weight[i], ntl.float32)


def application_bias(input, bias, eps, output):
    mean, scale = statistics(input, eps)
    for i in range(input.shape[0]):
        normalized = (ntl.cast(input[i], ntl.float32) - mean) * scale
        output[i] = normalized + ntl.cast(bias[i], ntl.float32)


def application(input, eps, output):
    mean, scale = statistics(input, eps)
    for i in range(input.shape[0]):
        output[i] = (ntl.cast(input[i], ntl.float32) - mean) * scale


def config(variant):
    return reduction.NORM_CONFIG


def premake(ndim, dtype, weight="given", bias="given", block_size=reduction.BLOCK_SIZE):
    input, output = Tensor(ndim, dtype=dtype, other=0), Tensor(ndim, dtype=dtype)
    vectors = tuple(Tensor(1, dtype=dtype, other=0) for on in (weight, bias) if on == "given")
    application_ = {
        ("given", "given"): application_weight_bias,
        ("given", "none"): application_weight,
        ("none", "given"): application_bias,
        ("none", "none"): application,
    }[weight, bias]
    tensors = (input, *vectors, Tensor(0, dtype=ninetoothed.float32), output)
    return functools.partial(arrangement, block_size=block_size), application_, tensors
