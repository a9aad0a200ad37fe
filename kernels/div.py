"""div: input / other (torch.div), rounded as `rounding_mode` says, to torch's bit.

torch computes these differently by operand, and so does this file:
- a tensor divisor: IEEE division (div_rn) in fp32 for half types; "trunc" truncates
  the quotient rounded to the input's dtype; "floor" is torch's div_floor_floating
  carried out in the input's dtype, every step rounded to it (so 1 // 0.1 is 9);
- a Python-number divisor: the input times the divisor's reciprocal, in fp32; "trunc"
  and "floor" round that fp32 value.

libdevice's division and fmod flush subnormal operands to zero where torch's do not
(701 / 2.9e-39 came out inf, and its floor NaN), so an operand pair holding a
subnormal is first scaled by 2^64: quotients and floors do not change under a common
power-of-two scale. Half-precision operands are never subnormal in fp32. A quotient
below fp32's normal range still comes out as zero (1e-39 / 3 is 0, not 3.3e-40).
"""

import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches={"rounding_mode": ("none", "trunc", "floor"), **element_wise.OTHER},
)

API = Api(
    "(Tensor input, Tensor|Number other, *, str? rounding_mode=None, Tensor? out=None)",
    "torch.div",
    samples=(
        sample(input=(6, 42, 123), other=(6, 42, 123)),
        sample(input=(6, 42, 123), other=(42, 1)),
        sample(input=(5, 1, 7), other=(1, 3, 7)),
        sample(input=(6, 42, 123), other=3),
        sample(input=(6, 42), other=()),
        sample(input=(6, 42, 123), other=(6, 42, 123), rounding_mode="trunc"),
        sample(input=(6, 42, 123), other=3, rounding_mode="floor"),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


# The kernels' code spells numbers out: ninetoothed does not carry module constants
# into them. 1.1754943508222875e-38 is fp32's smallest normal number; 2^64 scales the
# smallest subnormal, 2^-149, to a normal one.


def unflushing(a, b):
    """2^64 where fp32 `a` or `b` is subnormal, else 1: the scale both take first."""
    tiny = 1.1754943508222875e-38
    small = ((a != 0) & (ntl.abs(a) < tiny)) | ((b != 0) & (ntl.abs(b) < tiny))
    return ntl.where(small, 18446744073709551616.0, 1.0)


def application_none(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    scale = unflushing(a, b)
    a, b = a * scale, b * scale
    output = libdevice.div_rn(a, b)  # noqa: F841


def application_trunc(input, other, output):
    a, b = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    scale = unflushing(a, b)
    a, b = a * scale, b * scale
    quotient = ntl.cast(ntl.cast(libdevice.div_rn(a, b), input.dtype), ntl.float32)
    output = libdevice.trunc(quotient)  # noqa: F841


def application_floor(input, other, output):
    x, y = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    scale = unflushing(x, y)
    a, b = x * scale, y * scale
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
    # Scaling made a finite x infinite: a huge numerator over a subnormal divisor,
    # whose quotient overflows (torch's is inf; fmod(inf, b) would be NaN). `v - v` is
    # 0 for a finite v and NaN otherwise.
    huge = (a - a != 0) & (x - x == 0)
    output = ntl.where((b == 0) | huge, exact, floored)  # noqa: F841


def reciprocal(other):
    """1 / other in fp32, a subnormal `other` included (1 / 2.9e-39 is 3.4e38)."""
    b = ntl.cast(other, ntl.float32)
    small = (b != 0) & (ntl.abs(b) < 1.1754943508222875e-38)
    inverse = libdevice.div_rn(1.0, ntl.where(small, b * 18446744073709551616.0, b))
    return ntl.where(small, inverse * 18446744073709551616.0, inverse)


def application_scalar_none(input, other, output):
    inverse = reciprocal(other)
    output = ntl.cast(input, ntl.float32) * inverse  # noqa: F841


def application_scalar_trunc(input, other, output):
    inverse = reciprocal(other)
    output = libdevice.trunc(ntl.cast(input, ntl.float32) * inverse)  # noqa: F841


def application_scalar_floor(input, other, output):
    x, y = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    scale = unflushing(x, y)
    a, b = x * scale, y * scale
    remainder = libdevice.fmod(a, b)
    quotient = libdevice.div_rn(a - remainder, b)
    quotient = ntl.where((remainder != 0) & ((b < 0) != (remainder < 0)), quotient - 1.0, quotient)
    floored = libdevice.floor(quotient)
    floored = ntl.where(quotient - floored > 0.5, floored + 1.0, floored)
    floored = ntl.where(quotient == 0, libdevice.copysign(0.0, libdevice.div_rn(a, b)), floored)
    # Scaling made a finite x infinite: a huge numerator over a subnormal divisor,
    # whose quotient overflows (torch's is inf; fmod(inf, b) would be NaN). `v - v` is
    # 0 for a finite v and NaN otherwise.
    huge = (a - a != 0) & (x - x == 0)
    output = ntl.where((b == 0) | huge, libdevice.div_rn(a, b), floored)  # noqa: F841


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
