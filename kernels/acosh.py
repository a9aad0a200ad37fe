"""acosh: the inverse hyperbolic cosine of input (torch.acosh), in fp32 for half types.

libdevice's acoshf, the function torch's CUDA kernel calls (on the element widened to
fp32 for half types, the result rounded once): NaN below 1 (-inf included), 0 at 1,
inf at inf. Triton links libdevice's flush-to-zero build, whose acoshf is an ulp from
torch's for some fp32 inputs (1255 of the 30996 elements of 3 * randn, an H200); fp16
and bf16 results came out bit for bit torch's.
"""

import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

# float64 too: upstream ntops's tests call it on float64 tensors.
SPACE = VariantSpace(
    dtypes=(*FLOATS, "fp64"),
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
)

API = Api(
    "(Tensor input, *, Tensor? out=None)",
    "torch.acosh",
    samples=(
        # positive: |x| + 0.25, about half of it at or above 1, the rest NaN's
        sample("positive", input=(6, 42, 123)),
        sample("special", input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    output = libdevice.acosh(ntl.cast(input, ntl.float32))  # noqa: F841


def application_fp64(input, output):
    # float64 in float64: libdevice's acosh, as torch's CUDA kernel calls ::acosh
    # (libdevice's double functions keep subnormals).
    output = libdevice.acosh(input)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    application_ = application_fp64 if dtype == "fp64" else application
    return element_wise.unary(application_, ndim, dtype, block_size=block_size)
