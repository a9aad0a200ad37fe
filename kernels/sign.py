"""sign: -1, 0 or 1 by the sign of input (torch.sign); torch.sgn of real tensors too,
which is sign there (kernels/sgn.py declares sgn, whose runtime function sends real
tensors here and its own kernels complex ones).

As torch's kernels (c10::signum): (input > 0) - (input < 0), so NaN and -0.0 give +0.0
(not NaN, as NumPy would), and an unsigned input is never negative. Integer tensors
are built as the comparisons' are: torch takes them, and index arithmetic calls sign
on them.
"""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, INTEGERS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS + INTEGERS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
)

API = Api(
    "(Tensor input, *, Tensor? out=None)",
    "torch.sign",
    samples=(
        sample(input=(6, 42, 123)),
        sample("special", input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    # Widened to fp32 (exact; an integer keeps its sign, an unsigned one is never
    # negative), as Triton's interpreter needs for bf16; 0 - 0 is +0.0.
    x = ntl.cast(input, ntl.float32)
    output = ntl.where(x > 0, 1.0, 0.0) - ntl.where(x < 0, 1.0, 0.0)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
