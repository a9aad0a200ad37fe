"""pow: input ** exponent (torch.pow), a tensor or a Python scalar exponent; in fp32
for half types, with libdevice's powf.

A scalar exponent follows torch's pow_tensor_scalar_kernel: the exponent is rounded to
the input's dtype first; 0.5, -0.5 and -1 are sqrt, rsqrt and reciprocal; 2, 3 and -2
are products in the input's dtype, each rounded to it (torch's fp16 x ** -2 is
1 / fp16(x * x), which for |x| < 0.008 is a subnormal square and several ulps from
powf's). The exponent is one number, so the branch is uniform: each launch runs one
of them.

libdevice flushes subnormal operands to zero where torch does not ((2.9e-39) ** -0.52
came out 7.1e19 for 1.0e20), so a subnormal base is scaled by 2^64 first and the
result by 2^(-64 * exponent).
"""

import math

import ninetoothed.language as ntl
import torch
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches={"exponent": ("tensor", "scalar")},
)


def refuse_overflow(input, exponent):
    """torch refuses a number exponent that overflows the input's float dtype (it
    converts the exponent to it first)."""
    if isinstance(exponent, torch.Tensor) or not isinstance(input, torch.Tensor):
        return
    if not input.dtype.is_floating_point or not math.isfinite(exponent):
        return
    if math.fabs(exponent) > torch.finfo(input.dtype).max:
        raise RuntimeError(
            f"pow: exponent {exponent!r} cannot be converted to {input.dtype} "
            "without overflow (as torch refuses it)"
        )


API = Api(
    "(Tensor input, Tensor|Number exponent, *, Tensor? out=None)",
    "torch.pow",
    samples=(
        sample("positive", input=(6, 42, 123), exponent=(6, 42, 123)),
        sample("positive", input=(6, 42, 123), exponent=(42, 1)),
        sample("positive", input=(6, 42, 123), exponent=3),
        sample("positive", input=(6, 42), exponent=()),
    ),
    refuse=refuse_overflow,
)

arrangement = element_wise.arrangement
config = element_wise.config


def power(x, e):
    """powf(x, e) in fp32, a subnormal x included."""
    small = (x != 0) & (ntl.abs(x) < 1.1754943508222875e-38)  # subnormal
    result = libdevice.pow(ntl.where(small, x * 18446744073709551616.0, x), e)
    return ntl.where(small, result * libdevice.pow(5.421010862427522e-20, e), result)


def application(input, exponent, output):
    output = power(ntl.cast(input, ntl.float32), ntl.cast(exponent, ntl.float32))  # noqa: F841


def application_scalar(input, exponent, output):
    # Straight-line branches: ninetoothed's inliner left the temporaries of a helper
    # called inside an elif where that branch could not see them.
    x = ntl.cast(input, ntl.float32)
    e = ntl.cast(ntl.cast(exponent, input.dtype), ntl.float32)
    if e == 2.0:
        output = x * x
    elif e == 3.0:
        output = ntl.cast(ntl.cast(x * x, input.dtype), ntl.float32) * x
    elif e == -2.0:
        square = ntl.cast(ntl.cast(x * x, input.dtype), ntl.float32)
        small = (square != 0) & (square < 1.1754943508222875e-38)
        inverse = libdevice.div_rn(1.0, ntl.where(small, square * 18446744073709551616.0, square))
        output = ntl.where(small, inverse * 18446744073709551616.0, inverse)
    elif e == -1.0:
        small = (x != 0) & (ntl.abs(x) < 1.1754943508222875e-38)
        inverse = libdevice.div_rn(1.0, ntl.where(small, x * 18446744073709551616.0, x))
        output = ntl.where(small, inverse * 18446744073709551616.0, inverse)
    elif (e == 0.5) | (e == -0.5):
        small = (x != 0) & (ntl.abs(x) < 1.1754943508222875e-38)
        root = libdevice.sqrt_rn(ntl.where(small, x * 18446744073709551616.0, x))
        root = ntl.where(small, root * 2.3283064365386963e-10, root)
        output = ntl.where(e > 0, root, libdevice.div_rn(1.0, root))
    else:
        output = power(x, e)  # noqa: F841


def premake(ndim, dtype, exponent="tensor", block_size=element_wise.BLOCK_SIZE):
    application_ = application if exponent == "tensor" else application_scalar
    return element_wise.binary(application_, ndim, dtype, exponent, block_size=block_size)
