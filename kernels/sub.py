"""sub: output = input - alpha * other (torch.sub), computed in fp32 for half types."""

import ninetoothed
import ninetoothed.language as ntl
import torch

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches=element_wise.OTHER,
)


def refuse_bools(input, other, alpha):
    """torch refuses subtraction with bools (the kernels would compute it)."""
    if (
        other is True
        or other is False
        or any(
            isinstance(value, torch.Tensor) and value.dtype == torch.bool
            for value in (input, other)
        )
    ):
        raise RuntimeError(
            "sub: subtraction with a bool tensor is not supported (as in torch); "
            "to invert a mask, use the ~ operator or torch.logical_not()"
        )


API = Api(
    "(Tensor input, Tensor|Number other, *, Scalar alpha=1, Tensor? out=None)",
    "torch.sub",
    samples=(
        sample(input=(6, 42, 123), other=(6, 42, 123)),
        sample(input=(6, 42, 123), other=(42, 1)),
        sample(input=(5, 1, 7), other=(1, 3, 7)),
        sample(input=(6, 42, 123), other=3),
        sample(input=(6, 42), other=()),
        sample(input=(6, 42, 123), other=(123,), alpha=2),
        sample(input=(7, 5), other=2, alpha=3),
    ),
    refuse=refuse_bools,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, alpha, output):
    output = input - alpha * ntl.cast(other, ntl.float32)  # noqa: F841


def premake(ndim, dtype, other="tensor", block_size=element_wise.BLOCK_SIZE):
    scalars = (ninetoothed.float32,)
    return element_wise.binary(
        application, ndim, dtype, other, scalars=scalars, block_size=block_size
    )
