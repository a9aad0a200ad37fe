"""log_softmax over the last dim (torch.log_softmax); the runtime moves `dim` there.

softmax's tiling and first pass (`reduction.online_max_sum`: the row's maximum and
the sum of exp(x - max)); a second pass writes (x - max) - log(sum), in the order
torch's CUDA epilogue subtracts. Half types and fp32 compute in fp32, fp64 in fp64
(`dtype=torch.float64`, which torch computes in double).
"""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import reduction

SPACE = VariantSpace(dtypes=(*FLOATS, "fp64"), ndims=(2, 3), coalesce="leading")

API = Api(
    "(Tensor input, int dim, ScalarType? dtype=None)",
    "torch.log_softmax",
    wrapper="_log_softmax",
    samples=(
        sample(input=(6, 42, 123), dim=-1),
        sample(input=(6, 42, 123), dim=0),
        sample(input=(6, 42, 123), dim=1),
        sample(input=(37,), dim=0),
        sample(input=(4, 3000), dim=-1),
    ),
)

arrangement = reduction.arrangement


def log_softmax_rows(input, output, compute):
    row_max, row_sum = reduction.online_max_sum(input, compute)
    log_sum = ntl.log(row_sum)
    for i in range(input.shape[0]):
        output[i] = (ntl.cast(input[i], compute) - row_max) - log_sum


def application(input, output):
    log_softmax_rows(input, output, ntl.float32)


def application_fp64(input, output):
    log_softmax_rows(input, output, ntl.float64)


def config(variant):
    return reduction.CONFIG


def premake(ndim, dtype, block_size=reduction.BLOCK_SIZE):
    tensors = (Tensor(ndim, dtype=dtype, other=float("-inf")), Tensor(ndim, dtype=dtype))
    application_ = application_fp64 if dtype == "fp64" else application
    return functools.partial(arrangement, block_size=block_size), application_, tensors
