"""rsqrt: 1 / sqrt(input) (torch.rsqrt), computed in fp32 for half types. Subnormal
inputs are scaled by 2^64 first (and the result by 2^32): the hardware's reciprocal
square root flushes them to zero, and would return inf where torch returns ~1e19."""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, *, Tensor? out=None)",
    "torch.rsqrt",
    samples=(
        sample("positive", input=(6, 42, 123)),
        sample("positive", input=()),
        sample("positive", input=(0, 5)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    x = ntl.cast(input, ntl.float32)
    subnormal = (x > 0) & (x < 1.1754943508222875e-38)
    root = ntl.rsqrt(ntl.where(subnormal, x * 18446744073709551616.0, x))
    output = ntl.where(subnormal, root * 4294967296.0, root)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
