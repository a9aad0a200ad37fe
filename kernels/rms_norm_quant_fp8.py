"""rms_norm_quant_fp8: rms_norm over the last dim, times a weight, quantized to FP8
(e4m3fn) in the same pass over the activations: a scale per row (per token) or per row
and group of 128, from the normalized values in fp32 (never rounded to the input's
dtype), with per_token_group_quant_fp8's rules (kernels/_lib/fp8.py). What an FP8
layer runs before its QKV and gate/up products: vLLM's
`rms_norm_dynamic_per_token_quant`, and its per-group form for 128-block weights.

A program per `rows` rows, each row seen as tiles of `block_size` columns: the sum of
squares first, then per tile its groups' largest magnitudes and values (groups), or
the row's largest magnitude over every tile, then the values (per token; the later
passes find the row in L1 or L2).
"""

import functools

import ninetoothed.language as ntl
import triton
import triton.language as tl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FP8_ARCHES, FP8_NOTE, Config, VariantSpace

from ._lib import reduction
from ._lib.fp8 import (
    E4M3,
    group_quantized,
    group_scales,
    largest,
    most,
    quantized,
    reciprocal,
    scale_of,
)

GROUP = 128

SPACE = VariantSpace(
    dtypes=("fp16", "bf16", "fp32"),
    ndims=(2,),
    switches={"group": ("128", "row")},
    coalesce="none",
    unspecialized=("scale",),
    dims={
        "input": ("rows", "columns"),
        "weight": ("columns",),
        "scale": ("rows", "groups"),
        "output": ("rows", "columns"),
    },
    arches=FP8_ARCHES,
    arches_note=FP8_NOTE,
)

API = Api(
    "(Tensor input, Tensor weight, float? eps=None, int? group_size=None)",
    "ntops_prebuilt._fp8_reference.rms_norm_quant_reference",
    wrapper="_fp8_quant",
    returns="(Tensor, Tensor)",
    # One e4m3fn unit (2^-3 of a normal value, 2^-9 below them) where the fp32 values
    # round apart from torch's (sums of squares, exp: in another order, another ulp).
    tolerance=dict.fromkeys(("fp16", "bf16", "fp32"), (0.125, 2**-9)),
    samples=(
        sample(input=(6, 256), weight=(256,)),
        sample(input=(2, 3, 384), weight=(384,), group_size=128, eps=1e-6),
    ),
    doc="rms_norm then FP8 quantization per token or per group: (float8_e4m3fn, scales).",
)

# A row of a model's hidden size (2048-8192) in one or two tiles, as rms_norm's
# (reduction.NORM_CONFIG): H100, bf16, rows of 4096, against rms_norm alone in the same
# run (bench_fp8.py): tiles of 128 columns in 8 rows took 5-7x its time, of 2048 in 1
# row 1.05-1.34x.
CONFIGS = {
    "128": Config({"rows": 1, "block_size": 4096}, num_warps=8, num_stages=2),
    "row": Config({"rows": 1, "block_size": 4096}, num_warps=8, num_stages=2),
}


def steps(tensor, rows, width):
    """(rows, n) -> a program per `rows` rows, seeing their (rows, width) tiles."""
    arranged = tensor.tile((rows, width)).tile((1, -1))
    arranged.dtype = arranged.dtype.squeeze(0)
    return arranged


def arrangement(input, weight, eps, scale, floor, output, rows, width, group):
    tiles = steps(input, rows, width)
    weights = reduction.arrange_vector(weight, tiles, width)
    scales = steps(scale, rows, width // GROUP) if group else scale.tile((rows, 1))
    return tiles, weights, eps, scales, floor, steps(output, rows, width)


# The row's first tile is loaded once and kept: a row of up to `block_size` (a model's
# hidden size) is read once, where loading it again in each pass (sum of squares,
# largest magnitude, values) ran 1.16-1.45x rms_norm alone at 2048-8192 rows of 4096
# (H100, bf16; bench_fp8.py).
def inverse_rms(input, first, eps):
    """rsqrt(mean(row^2) + eps) of each of the program's rows, in fp32; `first` is the
    rows' first tile, in fp32."""
    squares = first * first
    for i in range(1, input.shape[0]):
        x = ntl.cast(input[i], ntl.float32)
        squares += x * x
    return ntl.rsqrt(ntl.sum(squares, 1) / input.source.shape[-1] + eps)


@triton.jit
def normalized(x, rstd, weight):
    """Rows x (rows, width) times their rsqrt (rows,) and the weight (width,), in fp32
    (a Triton function: ninetoothed loses tiles subscripted in an application)."""
    return x.to(tl.float32) * rstd[:, None] * weight.to(tl.float32)[None, :]


def application_group(input, weight, eps, scale, floor, output):
    first = ntl.cast(input[0], ntl.float32)
    rstd = inverse_rms(input, first, eps)
    y = normalized(first, rstd, weight[0])
    factors = group_scales(y, floor, 128)
    scale[0] = factors
    output[0] = group_quantized(y, factors, 128)
    for i in range(1, input.shape[0]):
        y = normalized(input[i], rstd, weight[i])
        factors = group_scales(y, floor, 128)
        scale[i] = factors
        output[i] = group_quantized(y, factors, 128)


def application_row(input, weight, eps, scale, floor, output):
    first = ntl.cast(input[0], ntl.float32)
    rstd = inverse_rms(input, first, eps)
    y = normalized(first, rstd, weight[0])
    amax = largest(y, 1)
    for i in range(1, input.shape[0]):
        amax = most(amax, largest(normalized(input[i], rstd, weight[i]), 1))
    factor = scale_of(amax, floor)
    scale = factor[:, None]  # noqa: F841
    inverse = reciprocal(factor)[:, None]
    output[0] = quantized(y, inverse)
    for i in range(1, input.shape[0]):
        output[i] = quantized(normalized(input[i], rstd, weight[i]), inverse)


def config(variant):
    return CONFIGS[dict(variant.switches)["group"]]


def premake(ndim, dtype, group="128", rows=1, block_size=4096):
    input, weight = Tensor(ndim, dtype=dtype, other=0), Tensor(1, dtype=dtype, other=0)
    scale, output = Tensor(ndim, dtype="fp32"), Tensor(ndim, dtype=E4M3)
    eps, floor = Tensor(0, dtype="fp32"), Tensor(0, dtype="fp32")
    grouped = group != "row"
    arrange = functools.partial(arrangement, rows=rows, width=block_size, group=grouped)
    application = application_group if grouped else application_row
    return arrange, application, (input, weight, eps, scale, floor, output)
