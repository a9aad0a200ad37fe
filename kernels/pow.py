"""pow: input ** exponent (torch.pow), a tensor or a Python scalar exponent; in fp32
for half types, with libdevice's powf."""

import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches={"exponent": ("tensor", "scalar")},
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, exponent, output):
    base = ntl.cast(input, ntl.float32)
    output = libdevice.pow(base, ntl.cast(exponent, ntl.float32))  # noqa: F841


def premake(ndim, dtype, exponent="tensor", block_size=element_wise.BLOCK_SIZE):
    return element_wise.binary(application, ndim, dtype, exponent, block_size=block_size)
