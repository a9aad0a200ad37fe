"""celu: input if input > 0 else alpha * (exp(input / alpha) - 1)
(torch.nn.functional.celu), in fp32 for half types.

torch computes celu as elu with an input scale: alpha and 1 / alpha (divided in fp64,
then each converted to fp32, its opmath type), expm1(x * (1 / alpha)) * alpha, and the
test `> 0`, so NaN stays NaN. The kernel takes alpha as an fp64 scalar to make both
numbers as torch does (fp32's 1 / fp32(alpha) is an ulp off for 28% of random alphas,
1.7 among them). alpha = 0 is refused as torch refuses it, and so is an alpha whose
fp32 conversions overflow.
"""

import math

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)


def refuse_celu_alpha(input, alpha):
    """torch refuses alpha = 0 (a division by it), and a finite alpha or 1 / alpha past
    fp32's range (its checked conversion to the opmath type)."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU (as torch refuses it)")
    largest = 3.4028234663852886e38  # fp32's
    for number in (alpha, 1.0 / alpha):
        if math.isfinite(number) and math.fabs(number) > largest:
            raise RuntimeError(
                f"celu: {number!r} (alpha {alpha!r} or its inverse) cannot be converted to "
                "float without overflow (as torch refuses it)"
            )


API = Api(
    "(Tensor input, float alpha=1.0, bool inplace=False)",
    "torch.nn.functional.celu",
    samples=(
        sample(input=(6, 42, 123)),
        sample("special", input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
        sample(input=(6, 42, 123), alpha=1.7),
        sample(input=(6, 42, 123), alpha=-1.5),
    ),
    refuse=refuse_celu_alpha,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, alpha, output):
    x = ntl.cast(input, ntl.float32)
    inverse = ntl.cast(1.0 / alpha, ntl.float32)  # divided in fp64, as torch's
    scaled = x * inverse
    # libdevice flushes a subnormal argument to zero in Triton's build; expm1(y) rounds
    # to y there, as torch's expm1f returns it.
    tiny = ntl.abs(scaled) < 1.1754943508222875e-38
    negative = ntl.where(tiny, scaled, libdevice.expm1(scaled)) * ntl.cast(alpha, ntl.float32)
    output = ntl.where(x > 0, x, negative)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float64,)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
