"""bitwise_and, bitwise_or: input & other, input | other (torch.bitwise_and and
bitwise_or), for integer and bool tensors, two functions of one kernel.

Which operation a call makes is the kernel's `operation` argument, a constant each
function passes (`Api(bound=...)`): one compile serves both.
"""

import ninetoothed
import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import family
from ntops_aot.aot.declare.space import BOOL, INTEGERS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=INTEGERS + BOOL,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches=element_wise.OTHER,
)

# The functions, in the order of their `operation` codes.
FUNCTIONS = ("bitwise_and", "bitwise_or")
API = family(
    FUNCTIONS,
    "(Tensor input, Tensor|Number other, *, Tensor? out=None)",
    "operation",
    samples=element_wise.BINARY_SAMPLES,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, operation, output):
    y = ntl.cast(other, input.dtype)
    # One branch for the whole launch (an `if` statement: Triton branches on a runtime
    # scalar in a statement, not in an expression), so the element-wise work is one op's.
    if operation == 0:  # noqa: SIM108
        output = input & y
    else:
        output = input | y  # noqa: F841


def premake(ndim, dtype, other="tensor", block_size=element_wise.BLOCK_SIZE):
    return element_wise.binary(
        application, ndim, dtype, other, scalars=(ninetoothed.int32,), block_size=block_size
    )
