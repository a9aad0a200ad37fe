"""maximum, fmax: the larger of input and other, element-wise, broadcast (torch.maximum
and torch.fmax), two functions of one kernel.

They differ only where an element is NaN: maximum propagates it (input's NaN first,
as torch's kernel tests input first), fmax takes the other operand (NaN where both
are). Which one a call makes is the kernel's `ignores_nan` argument, a constant each
function passes (`Api(bound=...)`), branched on once per launch: one compile serves
both. Floats are compared widened to fp32, as torch's kernels compare them (Triton's
maximum is PTX's max, fmaxf's instruction, so even the sign of a zero result is
torch's); integers as they are. torch takes no Python number for `other`. Upstream
ntops takes `out` by position as well, so both spellings work here.
"""

import ninetoothed
import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import family, sample
from ntops_aot.aot.declare.space import FLOATS, INTEGERS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS + INTEGERS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
)

# The functions, in the order of their `ignores_nan` codes.
FUNCTIONS = ("maximum", "fmax")
API = family(
    FUNCTIONS,
    "(Tensor input, Tensor other, Tensor? out=None)",
    "ignores_nan",
    samples=(
        sample(input=(6, 42, 123), other=(6, 42, 123)),
        sample("special", input=(6, 42, 123), other=(6, 42, 123)),
        sample(input=(6, 42, 123), other=(42, 1)),
        sample("special", input=(5, 1, 7), other=(1, 3, 7)),
        sample(input=(6, 42), other=()),
        sample(input=(0, 5), other=(5,)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, ignores_nan, output):
    x, y = ntl.cast(input, ntl.float32), ntl.cast(other, ntl.float32)
    # Triton's maximum returns the operand that is not NaN: fmax itself.
    if ignores_nan == 0:
        output = ntl.where(x != x, x, ntl.where(y != y, y, ntl.maximum(x, y)))
    else:
        output = ntl.maximum(x, y)  # noqa: F841


def application_integer(input, other, ignores_nan, output):
    output = ntl.maximum(input, other)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    """Floats compare widened, integers as they are (they have no NaN)."""
    application_ = application if dtype in element_wise.FLOAT_TYPES else application_integer
    return element_wise.binary(
        application_, ndim, dtype, "tensor", scalars=(ninetoothed.int32,), block_size=block_size
    )
