"""leaky_relu: input if input > 0 else negative_slope * input
(torch.nn.functional.leaky_relu), in fp32 for half types.

`negative_slope` is an fp32 scalar, as torch's CUDA kernel takes it (its opmath
type); the test is `> 0` as there, so NaN stays NaN (NaN * slope) and -0.0 takes
the slope's sign.
"""

import ninetoothed
import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, float negative_slope=0.01, bool inplace=False)",
    "torch.nn.functional.leaky_relu",
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
        sample(input=(6, 42, 123), negative_slope=0.2),
        sample(input=(6, 42, 123), negative_slope=2.5),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, negative_slope, output):
    x = ntl.cast(input, ntl.float32)
    output = ntl.where(x > 0, x, x * negative_slope)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float32,)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
