"""bitwise_or: input | other (torch.bitwise_or), for integer and bool tensors."""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import BOOL, INTEGERS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=INTEGERS + BOOL,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches=element_wise.OTHER,
)

API = Api(
    "(Tensor input, Tensor|Number other, *, Tensor? out=None)",
    "torch.bitwise_or",
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
    output = input | ntl.cast(other, input.dtype)  # noqa: F841


def premake(ndim, dtype, other="tensor", block_size=element_wise.BLOCK_SIZE):
    return element_wise.binary(application, ndim, dtype, other, block_size=block_size)
