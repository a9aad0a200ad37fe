"""elu: input if input > 0 else alpha * (exp(input) - 1) (torch.nn.functional.elu),
in fp32 for half types.

As torch's CUDA kernel: `alpha` an fp32 scalar (its opmath type), exp(x) - 1 as
libdevice's expm1 (the subtraction would lose the small results: for x = -1e-5 it
is off by about 1e-3 relatively), and the test `> 0`, so NaN stays NaN.
"""

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, float alpha=1.0, bool inplace=False)",
    "torch.nn.functional.elu",
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
        sample(input=(6, 42, 123), alpha=0.5),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, alpha, output):
    x = ntl.cast(input, ntl.float32)
    output = ntl.where(x > 0, x, libdevice.expm1(x) * alpha)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float32,)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
