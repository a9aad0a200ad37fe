"""alpha_dropout: each element kept with probability 1 - p as a * input + b, else set
to `saturated` (SELU's negative saturation, moved by the same affine map), so that
zero-mean unit-variance inputs stay so (torch.nn.functional.alpha_dropout).

The runtime (aot/runtime/_alpha_dropout.py) computes a, b and `saturated` from p as
torch does, and draws as kernels/dropout.py draws: Philox (Triton's rand) keyed by the
seed and offset of torch's CUDA generator, which the runtime advances, an element's
draw at its index in the launch's order plus the offset. Computed in fp32, rounded
once (torch rounds a half type between its multiply and its add).
"""

import ninetoothed
import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

# A training op, in a wheel for inference: contiguous tensors (one dim once merged) get
# the vectorised kernels, every other layout the 4-dim generic one. element_wise's 2-dim
# kernels would add three variants (8 CPU-s of an sm_80 build) for layouts of two dims
# that do not merge.
SPACE = VariantSpace(dtypes=FLOATS, ndims=(1, 4), specialized_ndims=element_wise.SPECIALIZED_NDIMS)

API = Api(
    "(Tensor input, float p=0.5, bool training=False, bool inplace=False)",
    "torch.nn.functional.alpha_dropout",
    wrapper="_alpha_dropout",
    samples=(
        sample(input=(6, 42, 123), p=0.5),
        sample(input=(6, 42, 123), p=0.3, training=False),
        sample(input=(6, 42, 123), p=0.0, training=True),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, seed, offset, p, a, b, saturated, output):
    index = ntl.program_id(0) * input.shape[0] + ntl.arange(0, input.shape[0])
    keep = ntl.rand(seed, offset + index) >= p
    output = ntl.where(keep, a * ntl.cast(input, ntl.float32) + b, saturated)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.int64, ninetoothed.int64, *(ninetoothed.float32,) * 4)
    return element_wise.unary(application, ndim, dtype, scalars=scalars, block_size=block_size)
