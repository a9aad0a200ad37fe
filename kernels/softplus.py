"""softplus: log1p(exp(input * beta)) / beta, or input where input * beta > threshold
(torch.nn.functional.softplus), in fp32 for half types.

torch's CUDA formula, in its order: beta and threshold are fp32 scalars (its opmath
type), and log1p is libdevice's, as torch's is (log(1 + e) loses the small results:
for input * beta below about -17, 1 + e rounds to 1 and log gives 0 where torch gives
e^(input * beta)). exp and the division are Triton's (ex2.approx and div.full in the
PTX, as in silu and sigmoid): a few fp32 ulps from torch's expf and IEEE division,
which half-type results rarely see. NaN stays NaN; +inf passes the threshold, -inf
gives 0.
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
    "(Tensor input, float beta=1.0, float threshold=20.0)",
    "torch.nn.functional.softplus",
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
        sample(input=(6, 42, 123), beta=2.0, threshold=5.0),
        sample(input=(6, 42, 123), beta=0.5),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, beta, threshold, output):
    x = ntl.cast(input, ntl.float32)
    scaled = x * beta
    output = ntl.where(scaled > threshold, x, libdevice.log1p(ntl.exp(scaled)) / beta)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float32, ninetoothed.float32)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
