"""add: output = input + alpha * other (torch.add)."""

import functools

import ninetoothed
from ninetoothed import Tensor
from ntops_aot.aot.space import FLOATS, VariantSpace
from ntops_aot.kernels import element_wise

SPACE = VariantSpace(dtypes=FLOATS, ndims=(1, 2, 3, 4))

arrangement = element_wise.arrangement


def application(input, other, alpha, output):
    output = input + alpha * other  # noqa: F841


def config(arch, dtype):
    return element_wise.CONFIG


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    tensors = (
        Tensor(ndim, dtype=dtype),
        Tensor(ndim, dtype=dtype),
        Tensor(0, dtype=ninetoothed.float32),
        Tensor(ndim, dtype=dtype),
    )
    return functools.partial(arrangement, block_size=block_size), application, tensors
