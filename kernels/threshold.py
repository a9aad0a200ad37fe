"""threshold: value where input <= threshold, else input (torch.nn.functional.threshold).

As torch's CUDA kernel: `threshold` and `value` converted to the input's dtype first
(through fp32, as c10's conversions go: the launcher passes fp32 scalars), the test
`input <= threshold` in it, so a NaN element stays NaN and a NaN threshold replaces
nothing. torch refuses a finite bound its conversion would overflow (1e5 for fp16);
so does the refusal here.
"""

import math

import ninetoothed
import ninetoothed.language as ntl
import torch

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)


def refuse_overflowing_numbers(input, threshold, value):
    """torch's CUDA kernel converts both numbers to the input's dtype, refusing a finite
    one past its range (c10's checked conversion; infinities and NaN pass)."""
    if not isinstance(input, torch.Tensor) or not input.dtype.is_floating_point:
        return
    largest = torch.finfo(input.dtype).max
    for name, number in (("threshold", threshold), ("value", value)):
        if math.isfinite(number) and math.fabs(number) > largest:
            raise RuntimeError(
                f"threshold: {name} {number!r} cannot be converted to {input.dtype} "
                "without overflow (as torch refuses it)"
            )


API = Api(
    "(Tensor input, float threshold, float value, bool inplace=False)",
    "torch.nn.functional.threshold",
    samples=(
        sample(input=(6, 42, 123), threshold=0.1, value=20.0),
        sample("special", input=(6, 42, 123), threshold=-0.5, value=-3.0),
        sample(input=(), threshold=0.0, value=0.5),
        sample(input=(0, 5), threshold=1.0, value=0.0),
    ),
    refuse=refuse_overflowing_numbers,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, threshold, value, output):
    # The numbers in the input's dtype, as torch's; compared widened to fp32 (exact, and
    # what Triton's interpreter needs for bf16).
    x = ntl.cast(input, ntl.float32)
    bound = ntl.cast(ntl.cast(threshold, input.dtype), ntl.float32)
    replacement = ntl.cast(ntl.cast(value, input.dtype), ntl.float32)
    output = ntl.where(x <= bound, replacement, x)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float32, ninetoothed.float32)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
