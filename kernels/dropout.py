"""dropout: input * keep / (1 - p), keep drawn with probability 1 - p per element.

Philox (Triton's rand) keyed by a seed and an offset that the runtime takes from
torch's CUDA generator and advances, so masks are fresh per call and repeat under
torch.manual_seed. An element's draw is at its index in the launch's iteration
order plus the offset.
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
    "(Tensor input, float p=0.5, bool training=True, bool inplace=False)",
    "torch.nn.functional.dropout",
    wrapper="_dropout",
    samples=(
        sample(input=(6, 42, 123), p=0.5, training=False),
        sample(input=(6, 42, 123), p=0.0),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, seed, offset, p, scale, output):
    index = ntl.program_id(0) * input.shape[0] + ntl.arange(0, input.shape[0])
    keep = ntl.rand(seed, offset + index) >= p
    output = ntl.where(keep, ntl.cast(input, ntl.float32) * scale, 0.0)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.int64, ninetoothed.int64, ninetoothed.float32, ninetoothed.float32)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
