"""div: input / other (torch.div), rounded as `rounding_mode` says, to torch's bit.

torch computes these differently by operand, and so does this file:
- a tensor divisor: IEEE division (div_rn) in fp32 for half types; "trunc" truncates
  the quotient rounded to the input's dtype; "floor" is torch's div_floor_floating
  carried out in the input's dtype, every step rounded to it (so 1 // 0.1 is 9);
- a Python-number divisor: the input times the divisor's reciprocal, in fp32; "trunc"
  and "floor" round that fp32 value.
"""

import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches={"rounding_mode": ("none", "trunc", "floor"), **element_wise.OTHER},
)

arrangement = element_wise.arrangement
config = element_wise.config


def application_none(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    output = libdevice.div_rn(a, b)  # noqa: F841


def application_trunc(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    quotient = ntl.cast(ntl.cast(libdevice.div_rn(a, b), input.dtype), ntl.float32)
    output = libdevice.trunc(quotient)  # noqa: F841


def application_floor(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    remainder = ntl.cast(ntl.cast(libdevice.fmod(a, b), input.dtype), ntl.float32)
    difference = ntl.cast(ntl.cast(a - remainder, input.dtype), ntl.float32)
    quotient = ntl.cast(ntl.cast(libdevice.div_rn(difference, b), input.dtype), ntl.float32)
    fix = (remainder != 0) & ((b < 0) != (remainder < 0))
    quotient = ntl.where(
        fix, ntl.cast(ntl.cast(quotient - 1.0, input.dtype), ntl.float32), quotient
    )
    floored = libdevice.floor(quotient)
    excess = ntl.cast(ntl.cast(quotient - floored, input.dtype), ntl.float32)
    floored = ntl.where(excess > 0.5, floored + 1.0, floored)
    exact = ntl.cast(ntl.cast(libdevice.div_rn(a, b), input.dtype), ntl.float32)
    floored = ntl.where(quotient == 0, libdevice.copysign(0.0, exact), floored)
    output = ntl.where(b == 0, exact, floored)  # noqa: F841


def application_scalar_none(input, other, output):
    reciprocal = libdevice.div_rn(1.0, ntl.cast(other, ntl.float32))
    output = ntl.cast(input, ntl.float32) * reciprocal  # noqa: F841


def application_scalar_trunc(input, other, output):
    reciprocal = libdevice.div_rn(1.0, ntl.cast(other, ntl.float32))
    output = libdevice.trunc(ntl.cast(input, ntl.float32) * reciprocal)  # noqa: F841


def application_scalar_floor(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    remainder = libdevice.fmod(a, b)
    quotient = libdevice.div_rn(a - remainder, b)
    quotient = ntl.where((remainder != 0) & ((b < 0) != (remainder < 0)), quotient - 1.0, quotient)
    floored = libdevice.floor(quotient)
    floored = ntl.where(quotient - floored > 0.5, floored + 1.0, floored)
    floored = ntl.where(quotient == 0, libdevice.copysign(0.0, libdevice.div_rn(a, b)), floored)
    output = ntl.where(b == 0, libdevice.div_rn(a, b), floored)  # noqa: F841


APPLICATIONS = {
    ("none", "tensor"): application_none,
    ("trunc", "tensor"): application_trunc,
    ("floor", "tensor"): application_floor,
    ("none", "scalar"): application_scalar_none,
    ("trunc", "scalar"): application_scalar_trunc,
    ("floor", "scalar"): application_scalar_floor,
}


def premake(ndim, dtype, rounding_mode="none", other="tensor", block_size=element_wise.BLOCK_SIZE):
    application = APPLICATIONS[rounding_mode, other]
    return element_wise.binary(application, ndim, dtype, other, block_size=block_size)
