"""gelu: exact (erf) or tanh-approximated (torch.nn.functional.gelu), in fp32."""

import ninetoothed.language as ntl
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches={"approximate": ("none", "tanh")},
)

API = Api(
    "(Tensor input, str approximate='none')",
    "torch.nn.functional.gelu",
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
        sample(input=(6, 42, 123), approximate="tanh"),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application_none(input, output):
    x = ntl.cast(input, ntl.float32)
    output = 0.5 * x * (1.0 + ntl.erf(x * 0.7071067811865476))  # noqa: F841


def application_tanh(input, output):
    x = ntl.cast(input, ntl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    output = 0.5 * x * (1.0 + libdevice.tanh(inner))  # noqa: F841


def premake(ndim, dtype, approximate="none", block_size=element_wise.BLOCK_SIZE):
    application = {"none": application_none, "tanh": application_tanh}[approximate]
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
