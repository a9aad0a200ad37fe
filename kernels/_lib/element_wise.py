"""Shared tiling of element-wise ops: every tensor flattened and cut into blocks.

The runtime coalesces dims before launching, so a contiguous tensor of any ndim
arrives here as one dim and its blocks are contiguous runs of memory. Kernels are
built for 1, 2 and 4 dims: the runtime pads a 3-dim call to the 4-dim kernel.
"""

import functools

import ninetoothed
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import sample
from ntops_aot.aot.declare.space import Config

NDIMS = (1, 2, 4)
# Flattened, 4 dims lose what the specialisations assume of the last one: Triton's
# alignment analysis does not follow it through three divisions (the aligned kernels
# of an sm_90 build came out byte for byte the unit-stride ones, all 228), and a
# stride of 1 saves one multiply per element of a memory-bound kernel. 4-dim calls
# take the generic kernel: two kernels fewer per 4-dim variant to compile.
SPECIALIZED_NDIMS = 2
# 1024 elements and 4 warps: 8 elements (fp32: two 128-bit loads) per thread.
BLOCK_SIZE = 1024
CONFIG = Config(num_warps=4, num_stages=1)
# Binary ops take `other` as a tensor or as a Python scalar, each its own kernel.
OTHER = {"other": ("tensor", "scalar")}
FLOAT_TYPES = ("fp16", "bf16", "fp32")
# Test calls of a binary op: same shapes, broadcasting both ways, a number, a 0-dim tensor.
BINARY_SAMPLES = (
    sample(input=(6, 42, 123), other=(6, 42, 123)),
    sample(input=(6, 42, 123), other=(42, 1)),
    sample(input=(5, 1, 7), other=(1, 3, 7)),
    sample(input=(6, 42, 123), other=3),
    sample(input=(6, 42), other=()),
)


def arrangement(*tensors, block_size=BLOCK_SIZE):
    return tuple(
        tensor if tensor.ndim == 0 else tensor.flatten().tile((block_size,)) for tensor in tensors
    )


def config(variant):
    return CONFIG


def unary(application, ndim, dtype, output_dtype=None, scalars=(), block_size=BLOCK_SIZE):
    """premake of output = f(input, *scalars), scalars given by their dtypes."""
    tensors = (
        Tensor(ndim, dtype=dtype),
        *(Tensor(0, dtype=scalar) for scalar in scalars),
        Tensor(ndim, dtype=output_dtype or dtype),
    )
    return functools.partial(arrangement, block_size=block_size), application, tensors


def binary(application, ndim, dtype, other, output_dtype=None, scalars=(), block_size=BLOCK_SIZE):
    """premake of output = f(input, other, *scalars); `other` is "tensor" or "scalar".

    A scalar `other` arrives as fp64 for float ops and as i64 for integer and bool
    ones; applications cast it to the input's dtype where torch would."""
    first = Tensor(ndim, dtype=dtype)  # created in order: tensors are named by a counter
    if other == "tensor":
        second = Tensor(ndim, dtype=dtype)
    else:
        second = Tensor(0, dtype=ninetoothed.float64 if dtype in FLOAT_TYPES else ninetoothed.int64)
    tensors = (
        first,
        second,
        *(Tensor(0, dtype=scalar) for scalar in scalars),
        Tensor(ndim, dtype=output_dtype or dtype),
    )
    return functools.partial(arrangement, block_size=block_size), application, tensors
