"""relu: max(input, 0) (torch.relu); NaN stays NaN as in torch."""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, bool inplace=False)",
    "torch.nn.functional.relu",
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    output = ntl.where(input < 0, 0, input)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
