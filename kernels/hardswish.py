"""hardswish: input * relu6(input + 3) / 6 (torch.nn.functional.hardswish), in fp32
for half types, as torch's CUDA kernel computes it: times fp32(1/6), not divided by 6
(its CPU kernel divides; the two differ by an ulp at most).

NaN stays NaN: Triton's maximum and minimum drop a NaN operand (relu6 of NaN is 0,
where torch's std::max keeps it), but the product with the input is NaN either way;
-inf gives NaN (-inf * 0) as in torch.
"""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, bool inplace=False)",
    "torch.nn.functional.hardswish",
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    x = ntl.cast(input, ntl.float32)
    output = x * ntl.minimum(ntl.maximum(x + 3.0, 0.0), 6.0) * 0.16666666666666666  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
