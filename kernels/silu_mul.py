"""silu_mul: silu(input) * other, the gate of a SwiGLU MLP (Llama, Mistral, Qwen) in
one pass. `F.silu(gate) * up` in torch, and silu then mul here, is two kernels and a
temporary the size of the MLP's activations. In fp32 for half types, rounded once."""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)

API = Api(
    "(Tensor input, Tensor other, *, Tensor? out=None)",
    "ntops_prebuilt._silu_mul.reference",
    wrapper="_silu_mul",
    samples=(
        sample(input=(6, 42, 123), other=(6, 42, 123)),
        sample(input=(6, 42, 123), other=(42, 1)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, other, output):
    x = ntl.cast(input, ntl.float32)
    output = x / (1.0 + ntl.exp(-x)) * ntl.cast(other, ntl.float32)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.binary(application, ndim, dtype, "tensor", block_size=block_size)
