"""softmax over the last dim (torch.softmax); the runtime moves `dim` there.

One pass keeps a running maximum and a running sum rescaled to it (online
softmax), a second writes exp(x - max) / sum: two reads of the row, one write.
Half types and fp32 compute in fp32, fp64 in fp64 (softmax's `dtype=torch.float64`,
which torch computes in double).
"""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import reduction

SPACE = VariantSpace(dtypes=(*FLOATS, "fp64"), ndims=(2, 3), coalesce="leading")


def arrangement(input, output, block_size=reduction.BLOCK_SIZE):
    rows = reduction.arrange_rows(input, block_size)
    return rows, reduction.arrange_rows(output, block_size)


def softmax_rows(input, output, compute):
    row_max = ntl.cast(float("-inf"), compute)
    row_sum = ntl.cast(0.0, compute)
    for i in range(input.shape[0]):
        x = ntl.cast(input[i], compute)
        new_max = ntl.maximum(row_max, ntl.max(x, 0))
        row_sum = row_sum * ntl.exp(row_max - new_max) + ntl.sum(ntl.exp(x - new_max), 0)
        row_max = new_max
    scale = 1.0 / row_sum
    for i in range(input.shape[0]):
        output[i] = ntl.exp(ntl.cast(input[i], compute) - row_max) * scale


def application(input, output):
    softmax_rows(input, output, ntl.float32)


def application_fp64(input, output):
    softmax_rows(input, output, ntl.float64)


def config(variant):
    return reduction.CONFIG


def premake(ndim, dtype, block_size=reduction.BLOCK_SIZE):
    tensors = (Tensor(ndim, dtype=dtype, other=float("-inf")), Tensor(ndim, dtype=dtype))
    application_ = application_fp64 if dtype == "fp64" else application
    return functools.partial(arrangement, block_size=block_size), application_, tensors
