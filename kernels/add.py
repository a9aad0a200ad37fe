"""add: output = input + alpha * other (torch.add), computed in fp32 for half types."""

import ninetoothed
import ninetoothed.language as ntl

from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches=element_wise.OTHER,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, alpha, output):
    output = input + alpha * ntl.cast(other, ntl.float32)  # noqa: F841


def premake(ndim, dtype, other="tensor", block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float32,)
    return element_wise.binary(
        application, ndim, dtype, other, scalars=scalars, block_size=block_size
    )
