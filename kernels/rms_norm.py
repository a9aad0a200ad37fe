"""rms_norm over the last dim: input * rsqrt(mean(input^2) + eps) [* weight].

The runtime flattens several normalized dims into one. Without a weight the
kernel reads nothing more than the input (switch `weight=none`) instead of
multiplying by a tensor of ones.
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
    switches={"weight": ("given", "none")},
    coalesce="leading",
    fixed=("weight",),
    # The launcher checks the weight against the rows' last dim (their length).
    dims={"input": ("columns",), "weight": ("columns",)},
)

API = Api(
    "(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None)",
    "torch.nn.functional.rms_norm",
    wrapper="_rms_norm",
    samples=(
        sample(input=(6, 42, 123), normalized_shape=[123], weight=(123,)),
        sample(input=(6, 42, 123), normalized_shape=[42, 123]),
        sample(input=(6, 4096), normalized_shape=[4096], weight=(4096,), eps=1e-6),
    ),
)


def arrangement(input, weight, eps, welford, output, block_size=reduction.BLOCK_SIZE):
    rows = reduction.arrange_rows(input, block_size)
    weight = reduction.arrange_vector(weight, rows, block_size)
    return rows, weight, eps, welford, reduction.arrange_rows(output, block_size)


def arrangement_without_weight(input, eps, welford, output, block_size=reduction.BLOCK_SIZE):
    rows = reduction.arrange_rows(input, block_size)
    return rows, eps, welford, reduction.arrange_rows(output, block_size)


def inverse_rms(input, eps, welford):
    """rsqrt(mean(row^2) + eps): inlined into both applications by ninetoothed.

    torch's CUDA rms_norm has two kernels, and they disagree on a row holding an
    infinity: its vectorized one (rows of a multiple of 4 elements, aligned) sums
    squares, giving 0 for the row's finite elements; its Welford one (the others)
    makes the whole row NaN (inf - inf). `welford` says which one torch would run for
    this call; `x - x` is 0 for a finite x and NaN for an infinite one."""
    squares = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    for i in range(input.shape[0]):
        x = ntl.cast(input[i], ntl.float32)
        squares += x * x + ntl.where(welford != 0, x - x, 0.0)
    return ntl.rsqrt(ntl.sum(squares, 0) / input.source.shape[-1] + eps)


def application(input, weight, eps, welford, output):
    scale = inverse_rms(input, eps, welford)
    for i in range(input.shape[0]):
        normalized = ntl.cast(input[i], ntl.float32) * scale
        output[i] = normalized * ntl.cast(weight[i], ntl.float32)


def application_without_weight(input, eps, welford, output):
    scale = inverse_rms(input, eps, welford)
    for i in range(input.shape[0]):
        output[i] = ntl.cast(input[i], ntl.float32) * scale


def config(variant):
    return reduction.NORM_CONFIG


def premake(ndim, dtype, weight="given", block_size=reduction.BLOCK_SIZE):
    input, output = Tensor(ndim, dtype=dtype, other=0), Tensor(ndim, dtype=dtype)
    eps, welford = Tensor(0, dtype=ninetoothed.float32), Tensor(0, dtype=ninetoothed.int64)
    if weight == "none":
        arrange = functools.partial(arrangement_without_weight, block_size=block_size)
        return arrange, application_without_weight, (input, eps, welford, output)
    tensors = (input, Tensor(1, dtype=dtype, other=0), eps, welford, output)
    return functools.partial(arrangement, block_size=block_size), application, tensors
