"""rms_norm over the last dim: input * rsqrt(mean(input^2) + eps) [* weight].

The runtime flattens several normalized dims into one. Without a weight the
kernel reads nothing more than the input (switch `weight=none`) instead of
multiplying by a tensor of ones.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import reduction

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2, 3),
    switches={"weight": ("given", "none")},
    coalesce="leading",
    fixed=("weight",),
)


def arrangement(input, weight, eps, output, block_size=reduction.BLOCK_SIZE):
    rows = reduction.arrange_rows(input, block_size)
    weight = reduction.arrange_vector(weight, rows, block_size)
    return rows, weight, eps, reduction.arrange_rows(output, block_size)


def arrangement_without_weight(input, eps, output, block_size=reduction.BLOCK_SIZE):
    rows = reduction.arrange_rows(input, block_size)
    return rows, eps, reduction.arrange_rows(output, block_size)


def inverse_rms(input, eps):
    """rsqrt(mean(row^2) + eps): inlined into both applications by ninetoothed."""
    squares = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    for i in range(input.shape[0]):
        x = ntl.cast(input[i], ntl.float32)
        squares += x * x
    return ntl.rsqrt(ntl.sum(squares, 0) / input.source.shape[-1] + eps)


def application(input, weight, eps, output):
    scale = inverse_rms(input, eps)
    for i in range(input.shape[0]):
        normalized = ntl.cast(input[i], ntl.float32) * scale
        output[i] = normalized * ntl.cast(weight[i], ntl.float32)


def application_without_weight(input, eps, output):
    scale = inverse_rms(input, eps)
    for i in range(input.shape[0]):
        output[i] = ntl.cast(input[i], ntl.float32) * scale


def config(variant):
    return reduction.NORM_CONFIG


def premake(ndim, dtype, weight="given", block_size=reduction.BLOCK_SIZE):
    input, output = Tensor(ndim, dtype=dtype, other=0), Tensor(ndim, dtype=dtype)
    eps = Tensor(0, dtype=ninetoothed.float32)
    if weight == "none":
        arrange = functools.partial(arrangement_without_weight, block_size=block_size)
        return arrange, application_without_weight, (input, eps, output)
    tensors = (input, Tensor(1, dtype=dtype, other=0), eps, output)
    return functools.partial(arrangement, block_size=block_size), application, tensors
