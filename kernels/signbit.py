"""signbit: whether input's sign bit is set (torch.signbit), a bool tensor.

The bit as torch's CUDA kernel tests it, on the element widened to fp32, read here by
reinterpreting elements as integers of their width: -0.0 and negative numbers are True,
+0.0 False, a NaN by its sign bit (a comparison `input < 0` would miss -0.0 and every
NaN), except in fp16, where the widening (PTX's cvt.f32.f16) makes every NaN the
positive canonical one: a negative fp16 NaN is False (on an H200, torch 2.11; torch's
CPU kernel says True), a negative bf16 or fp32 NaN True, as there. torch refuses an
out= of another dtype than bool (the launcher would cast into it, as torch lets
comparisons do): so does the refusal here.
"""

import ninetoothed.language as ntl
import torch

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=FLOATS, ndims=element_wise.NDIMS, specialized_ndims=element_wise.SPECIALIZED_NDIMS
)


def refuse_non_bool_out(input, out=None):
    """torch's signbit writes bools only: it refuses an out= of another dtype."""
    if isinstance(out, torch.Tensor) and out.dtype != torch.bool:
        raise RuntimeError(
            f"signbit does not support non-boolean outputs: out is {out.dtype} "
            "(as torch refuses it)"
        )


API = Api(
    "(Tensor input, *, Tensor? out=None)",
    "torch.signbit",
    samples=(
        sample(input=(6, 42, 123)),
        sample("special", input=(6, 42, 123)),
        sample(input=()),
        sample(input=(0, 5)),
    ),
    refuse=refuse_non_bool_out,
)

arrangement = element_wise.arrangement
config = element_wise.config


def application_fp32(input, output):
    output = ntl.cast(input, ntl.int32, bitcast=True) < 0  # noqa: F841


def application_bf16(input, output):
    output = ntl.cast(input, ntl.int16, bitcast=True) < 0  # noqa: F841


def application_fp16(input, output):
    # torch's widening makes a NaN positive; Triton's compiler reads the widened sign
    # from the fp16 bits (no cvt left in the PTX), so NaN is tested for here.
    output = (ntl.cast(input, ntl.int16, bitcast=True) < 0) & (input == input)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    """The sign bit as torch's CUDA kernel sees it, by dtype (see the module's doc)."""
    application = {"fp32": application_fp32, "bf16": application_bf16}.get(dtype, application_fp16)
    return element_wise.unary(application, ndim, dtype, output_dtype="i1", block_size=block_size)
