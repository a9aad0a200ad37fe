"""eq, ne, lt, le, gt, ge: input <op> other, a bool tensor (torch.eq and the others),
six functions of one kernel.

`other` is a tensor of the input's dtype or a Python scalar, cast to the input's dtype
first as torch does (an fp16 tensor compares with fp16(0.1), not with 0.1). Which
comparison a call makes is the kernel's `comparison` argument, a constant each function
passes (`Api(bound=...)`): the kernel branches on it once per launch, so each element
costs what it would in a kernel of its own, and a build compiles one kernel where six
were compiled.
"""

import ninetoothed
import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import family
from ntops_aot.aot.declare.space import BOOL, FLOATS, INTEGERS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS + INTEGERS + BOOL,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches=element_wise.OTHER,
)

# The functions, in the order of their `comparison` codes.
FUNCTIONS = ("eq", "ne", "lt", "le", "gt", "ge")
API = family(
    FUNCTIONS,
    "(Tensor input, Tensor|Number other, *, Tensor? out=None)",
    "comparison",
    samples=element_wise.BINARY_SAMPLES,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, comparison, output):
    y = ntl.cast(other, input.dtype)
    # One branch for the whole launch (`comparison` is the same for every element): each
    # element gets one compare, as in a kernel of its own. (Selecting among six compares
    # per element measured 1.8-2.9x slower on 1-byte dtypes.)
    if comparison == 0:
        output = input == y
    elif comparison == 1:
        output = input != y
    elif comparison == 2:
        output = input < y
    elif comparison == 3:
        output = input <= y
    elif comparison == 4:
        output = input > y
    else:
        output = input >= y  # noqa: F841


def premake(ndim, dtype, other="tensor", block_size=element_wise.BLOCK_SIZE):
    return element_wise.binary(
        application,
        ndim,
        dtype,
        other,
        output_dtype="i1",
        scalars=(ninetoothed.int32,),
        block_size=block_size,
    )
