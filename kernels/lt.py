"""lt: input < other, a bool tensor (torch.lt).

`other` is a tensor of the input's dtype or a Python scalar, cast to the input's
dtype first as torch does (an fp16 tensor compares with fp16(0.1), not with 0.1).
"""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import BOOL, FLOATS, INTEGERS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS + INTEGERS + BOOL,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches=element_wise.OTHER,
)

API = Api(
    "(Tensor input, Tensor|Number other, *, Tensor? out=None)",
    "torch.lt",
    samples=(
        sample(input=(6, 42, 123), other=(6, 42, 123)),
        sample(input=(6, 42, 123), other=(42, 1)),
        sample(input=(5, 1, 7), other=(1, 3, 7)),
        sample(input=(6, 42, 123), other=3),
        sample(input=(6, 42), other=()),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, output):
    output = input < ntl.cast(other, input.dtype)  # noqa: F841


def premake(ndim, dtype, other="tensor", block_size=element_wise.BLOCK_SIZE):
    return element_wise.binary(
        application, ndim, dtype, other, output_dtype="i1", block_size=block_size
    )
