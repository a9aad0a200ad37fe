"""div: input / other (torch.div), rounded as `rounding_mode` says.

IEEE division (div_rn), in fp32 for half types. "floor" follows torch's
div_floor_floating: the quotient of (input - fmod) / other, corrected by the sign
of the remainder and rounded to the nearest integer, so that 1 // 0.1 is 9, not 10.
"""

import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    switches={"rounding_mode": ("none", "trunc", "floor"), **element_wise.OTHER},
)

arrangement = element_wise.arrangement
config = element_wise.config


def application_none(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    output = libdevice.div_rn(a, b)  # noqa: F841


def application_trunc(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    output = libdevice.trunc(libdevice.div_rn(a, b))  # noqa: F841


def application_floor(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    remainder = libdevice.fmod(a, b)
    quotient = libdevice.div_rn(a - remainder, b)
    quotient = ntl.where((remainder != 0) & ((b < 0) != (remainder < 0)), quotient - 1.0, quotient)
    floored = libdevice.floor(quotient)
    floored = ntl.where(quotient - floored > 0.5, floored + 1.0, floored)
    floored = ntl.where(quotient == 0, libdevice.copysign(0.0, libdevice.div_rn(a, b)), floored)
    output = ntl.where(b == 0, libdevice.div_rn(a, b), floored)  # noqa: F841


def premake(ndim, dtype, rounding_mode="none", other="tensor", block_size=element_wise.BLOCK_SIZE):
    application = {
        "none": application_none,
        "trunc": application_trunc,
        "floor": application_floor,
    }[rounding_mode]
    return element_wise.binary(application, ndim, dtype, other, block_size=block_size)
