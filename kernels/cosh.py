"""cosh: the hyperbolic cosine of input (torch.cosh), in fp32 for half types.

libdevice's coshf, the function torch's CUDA kernel calls (on the element widened to
fp32 for half types, the result rounded once): inf at +-inf and where the result
passes the dtype's range (|x| > 89.4 in fp32, 11.8 in fp16), NaN stays NaN.
"""

import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, *, Tensor? out=None)",
    "torch.cosh",
    samples=(
        sample(input=(6, 42, 123)),
        sample("special", input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    output = libdevice.cosh(ntl.cast(input, ntl.float32))  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
