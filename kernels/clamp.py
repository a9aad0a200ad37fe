"""clamp: min(max(input, min), max) (torch.clamp), bounds as Python numbers.

A missing bound arrives as an infinity. NaN inputs stay NaN and a NaN bound makes
every element NaN, as in torch; with min > max every element becomes max, as in torch.
"""

import ninetoothed
import ninetoothed.language as ntl

from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, min, max, output):
    x = ntl.cast(input, ntl.float32)
    clamped = ntl.minimum(ntl.maximum(x, min), max)
    # Triton's minimum and maximum return the operand that is not NaN; the sum is NaN
    # when any of the three is.
    output = ntl.where((x != x) | (min != min) | (max != max), x + min + max, clamped)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float32, ninetoothed.float32)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
