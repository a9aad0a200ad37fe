"""bitwise_and: input & other (torch.bitwise_and), for integer and bool tensors."""

import ninetoothed.language as ntl

from ntops_aot.aot.space import BOOL, INTEGERS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(
    dtypes=INTEGERS + BOOL,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches=element_wise.OTHER,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, output):
    output = input & ntl.cast(other, input.dtype)  # noqa: F841


def premake(ndim, dtype, other="tensor", block_size=element_wise.BLOCK_SIZE):
    return element_wise.binary(application, ndim, dtype, other, block_size=block_size)
