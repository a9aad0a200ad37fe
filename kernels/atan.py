"""atan: the arctangent of input (torch.atan), in fp32 for half types.

libdevice's atanf, the function torch's CUDA kernel calls (on the element widened to
fp32 for half types, the result rounded once): atan(+-inf) is +-pi/2, NaN stays NaN.
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
    "torch.atan",
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
    x = ntl.cast(input, ntl.float32)
    # libdevice flushes a subnormal argument to zero in Triton's build; atan(x) rounds to
    # x there, as torch's atanf returns it.
    output = ntl.where(ntl.abs(x) < 1.1754943508222875e-38, x, libdevice.atan(x))  # noqa: F841


def application_fp64(input, output):
    # float64 in float64: libdevice's atan, as torch's CUDA kernel calls ::atan
    # (libdevice's double functions keep subnormals).
    output = libdevice.atan(input)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    application_ = application_fp64 if dtype == "fp64" else application
    return element_wise.unary(application_, ndim, dtype, block_size=block_size)
