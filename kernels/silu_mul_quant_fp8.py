"""silu_mul_quant_fp8: silu(input) * other quantized to FP8 (e4m3fn) in one pass, a
scale per row (per token) or per row and group of 128, from the products in fp32
(never rounded to the input's dtype), with per_token_group_quant_fp8's rules
(kernels/_lib/fp8.py): the gate of an FP8 layer's MLP before its down projection, which
vLLM fuses as `silu_and_mul` + quantization.

Groups: a program per `rows` rows and group, as per_token_group_quant_fp8's. Per
token: a program per row, its tiles of `block_size` twice, the row's largest magnitude
first (the second pass finds the row in L2).
"""

import functools

import ninetoothed.language as ntl
import triton
import triton.language as tl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FP8_ARCHES, FP8_NOTE, Config, VariantSpace

from ._lib.fp8 import E4M3, largest, most, quantized, reciprocal, scale_of

SPACE = VariantSpace(
    dtypes=("fp16", "bf16", "fp32"),
    ndims=(2,),
    switches={"group": ("128", "row")},
    coalesce="none",
    unspecialized=("scale",),
    dims={
        "input": ("rows", "columns"),
        "other": ("rows", "columns"),
        "scale": ("rows", "groups"),
        "output": ("rows", "columns"),
    },
    arches=FP8_ARCHES,
    arches_note=FP8_NOTE,
)

API = Api(
    "(Tensor input, Tensor other, int? group_size=None)",
    "ntops_prebuilt._fp8_reference.silu_mul_quant_reference",
    wrapper="_fp8_quant",
    returns="(Tensor, Tensor)",
    # One e4m3fn unit (2^-3 of a normal value, 2^-9 below them) where the fp32 values
    # round apart from torch's (sums of squares, exp: in another order, another ulp).
    tolerance=dict.fromkeys(("fp16", "bf16", "fp32"), (0.125, 2**-9)),
    samples=(
        sample(input=(6, 256), other=(6, 256)),
        sample(input=(2, 3, 384), other=(2, 3, 384), group_size=128),
    ),
    doc="silu(input) * other then FP8 quantization per token or per group.",
)

# Per token, an MLP's rows (8192-18944) in tiles of 8192: in tiles of 2048 (4 warps) one
# row took 13 us, 2.3-2.8x silu_mul alone, its 14 loads one after another (H100, bf16,
# rows of 14336; bench_fp8.py).
CONFIGS = {
    "128": Config({"rows": 64}, num_warps=8, num_stages=2),
    "row": Config({"rows": 1, "block_size": 8192}, num_warps=8, num_stages=2),
}


def arrangement_group(input, other, scale, floor, output, rows, width):
    tile = (rows, width)
    return input.tile(tile), other.tile(tile), scale.tile((rows, 1)), floor, output.tile(tile)


def arrangement_row(input, other, scale, floor, output, rows, width):
    def steps(tensor):
        arranged = tensor.tile((rows, width)).tile((1, -1))
        arranged.dtype = arranged.dtype.squeeze(0)
        return arranged

    return steps(input), steps(other), scale.tile((rows, 1)), floor, steps(output)


@triton.jit
def gated(x, y):
    """silu(x) * y in fp32 (a Triton function: ninetoothed inlines a Python one, and
    then loses the tiles passed to it)."""
    x = x.to(tl.float32)
    return x / (1.0 + tl.exp(-x)) * y.to(tl.float32)


def application_group(input, other, scale, floor, output):
    y = gated(input, other)
    factor = scale_of(largest(y, 1), floor)
    scale = factor[:, None]  # noqa: F841
    output = quantized(y, reciprocal(factor)[:, None])  # noqa: F841


def application_row(input, other, scale, floor, output):
    amax = ntl.zeros((input.dtype.shape[0],), dtype=ntl.float32)
    for i in range(input.shape[0]):
        amax = most(amax, largest(gated(input[i], other[i]), 1))
    factor = scale_of(amax, floor)
    scale = factor[:, None]  # noqa: F841
    inverse = reciprocal(factor)[:, None]
    for i in range(input.shape[0]):
        output[i] = quantized(gated(input[i], other[i]), inverse)


def config(variant):
    return CONFIGS[dict(variant.switches)["group"]]


def premake(ndim, dtype, group="128", rows=64, block_size=8192):
    input, other = Tensor(ndim, dtype=dtype, other=0), Tensor(ndim, dtype=dtype, other=0)
    scale, output = Tensor(ndim, dtype="fp32"), Tensor(ndim, dtype=E4M3)
    tensors = (input, other, scale, Tensor(0, dtype="fp32"), output)
    if group == "row":
        arrange = functools.partial(arrangement_row, rows=rows, width=block_size)
        return arrange, application_row, tensors
    arrange = functools.partial(arrangement_group, rows=rows, width=128)
    return arrange, application_group, tensors
