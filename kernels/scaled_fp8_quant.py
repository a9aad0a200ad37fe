"""scaled_fp8_quant: FP8 (e4m3fn) quantization with one scale for the whole tensor, x
times its reciprocal saturated to +-448 (kernels/_lib/fp8.py's rules): the kernel of
vLLM's `scaled_fp8_quant` with a scale, given (static) or found from the tensor's largest
magnitude (dynamic; aot/runtime/_fp8_quant.py finds it first). The scale, a float32
tensor of one element, reaches every element broadcast (stride 0)."""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, FP8_ARCHES, FP8_NOTE, VariantSpace

from ._lib import element_wise
from ._lib.fp8 import E4M3, quantized, reciprocal

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    in_place=False,
    # Broadcast (stride 0): the specialisations assume nothing of it.
    unspecialized=("scale",),
    arches=FP8_ARCHES,
    arches_note=FP8_NOTE,
)

API = Api(
    "(Tensor input, Tensor? scale=None, bool use_per_token_if_dynamic=False, float? scale_ub=None)",
    "ntops_prebuilt._fp8_reference.scaled_reference",
    wrapper="_fp8_quant",
    returns="(Tensor, Tensor)",
    # Dynamic scales: a static one is a float32 tensor, which samples (in the op's
    # dtypes) cannot give; tests/ops/scaled_fp8_quant.py calls it.
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=(6, 42, 128), use_per_token_if_dynamic=True),
        sample(input=(6, 42, 128), use_per_token_if_dynamic=True, scale_ub=0.5),
    ),
    doc="FP8 quantization with a scale per tensor or per token: (float8_e4m3fn, scale).",
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, scale, output):
    # The block's scale is one value broadcast (stride 0): its reciprocal once a block.
    inverse = reciprocal(ntl.max(scale, 0))
    output = quantized(ntl.cast(input, ntl.float32), inverse)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    tensors = (Tensor(ndim, dtype=dtype), Tensor(ndim, dtype="fp32"), Tensor(ndim, dtype=E4M3))
    arrange = functools.partial(element_wise.arrangement, block_size=block_size)
    return arrange, application, tensors
