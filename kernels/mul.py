"""mul: output = input * other (torch.mul)."""

import functools

from ninetoothed import Tensor
from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(dtypes=FLOATS, ndims=(1, 2, 3, 4))

arrangement = element_wise.arrangement


def application(input, other, output):
    output = input * other  # noqa: F841


def config(arch, dtype):
    return element_wise.CONFIG


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    tensors = (Tensor(ndim, dtype=dtype), Tensor(ndim, dtype=dtype), Tensor(ndim, dtype=dtype))
    return functools.partial(arrangement, block_size=block_size), application, tensors
