"""per_token_group_quant_fp8: dynamic FP8 (e4m3fn) quantization of each row's groups of
`group_size` elements, or of each whole row (per token): a scale per group, max(min(amax,
ub), eps) / 448, and the group times its reciprocal, saturated to +-448 (`ub`, an upper
bound of the largest magnitude: +inf but for scaled_fp8_quant's `scale_ub`). vLLM's and SGLang's
`per_token_group_quant_fp8` (DeepSeek-style 1 x 128 activation blocks) and the
per-token half of vLLM's `scaled_fp8_quant` (aot/runtime/_fp8_quant.py).

Scales are float32 dequantization factors (x ~ q * scale), as torch._scaled_mm's and
vLLM's. A group holding a NaN has a NaN scale and quantizes to NaN, as torch's
`x.abs().amax()` would make it; infinities quantize to NaN, as torch's cast to
float8_e4m3fn does (e4m3fn has no infinity), and finite values past +-448 saturate.

The runtime hands 2-dim rows. Switch `group`: "128", a program per 64 rows and group,
their scales and values at once; "row", a program per row, its tiles of 2048 read
twice, the row's largest magnitude first (the second pass finds it in L2).
"""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FP8_ARCHES, FP8_NOTE, Config, VariantSpace

from ._lib.fp8 import E4M3, bounded, largest, most, quantized, reciprocal, scale_of

SPACE = VariantSpace(
    dtypes=("fp16", "bf16", "fp32"),
    ndims=(2,),
    switches={"group": ("128", "row")},
    coalesce="none",
    unspecialized=("scale",),
    dims={
        "input": ("rows", "columns"),
        "scale": ("rows", "groups"),
        "output": ("rows", "columns"),
    },
    arches=FP8_ARCHES,
    arches_note=FP8_NOTE,
)

API = Api(
    "(Tensor input, int group_size, float eps=1e-10, bool column_major_scales=False)",
    "ntops_prebuilt._fp8_reference.group_reference",
    wrapper="_fp8_quant",
    returns="(Tensor, Tensor)",
    samples=(
        sample(input=(6, 256), group_size=128),
        sample(input=(2, 3, 384), group_size=128, eps=1e-4),
        sample(input=(5, 96), group_size=96),
        sample(input=(4, 256), group_size=128, column_major_scales=True),
    ),
    doc="Per-token-group FP8 quantization: (float8_e4m3fn values, float32 scales).",
)

# Rows a program takes: a tile of `rows` x 128 a group, `rows` x `block_size` a step of
# a whole row. H100, bf16, CUDA graphs, against a copy of the input in the same run
# (tests/benchmarks/bench_fp8.py; 8192 x 4096 and 2048 x 14336 / 2048 x 4096 / 1 x
# 4096): groups of 64 rows in 8 warps 0.94-0.96 / 0.74 / 4.4 us, of 16 rows in 4 warps
# 0.88 / 0.63 / 3.8-6 us, 32 rows 0.85-0.86, 8 rows in 3 stages 0.67; whole rows one
# at a time in tiles of 2048, 4 warps: 0.84 and 0.60 / 0.55 / 6.5 us, 4 rows in tiles
# of 1024 0.65 and 0.51, tiles of 4096 in 8 warps 0.66 and 0.70, 2 rows of 2048 in 3
# stages 0.77 and 0.58 (the second pass over a row reads it from L2).
CONFIGS = {
    "128": Config({"rows": 64}, num_warps=8, num_stages=2),
    "row": Config({"rows": 1, "block_size": 2048}, num_warps=4, num_stages=2),
}


def arrangement_group(input, scale, eps, ub, output, rows, group=128):
    """A program per ROWS rows and group: (rows, group) tiles and their (rows, 1) scales."""
    return input.tile((rows, group)), scale.tile((rows, 1)), eps, ub, output.tile((rows, group))


def arrangement_row(input, scale, eps, ub, output, rows, block_size):
    """A program per ROW_ROWS rows, seeing their (rows, block_size) tiles one after
    another, and their (rows, 1) scales."""

    def steps(tensor):
        arranged = tensor.tile((rows, block_size)).tile((1, -1))
        arranged.dtype = arranged.dtype.squeeze(0)
        return arranged

    return steps(input), scale.tile((rows, 1)), eps, ub, steps(output)


def application_group(input, scale, eps, ub, output):
    x = ntl.cast(input, ntl.float32)
    factor = scale_of(bounded(largest(x, 1), ub), eps)
    scale = factor[:, None]  # noqa: F841
    output = quantized(x, reciprocal(factor)[:, None])  # noqa: F841


def application_row(input, scale, eps, ub, output):
    amax = ntl.zeros((input.dtype.shape[0],), dtype=ntl.float32)
    for i in range(input.shape[0]):
        amax = most(amax, largest(ntl.cast(input[i], ntl.float32), 1))
    factor = scale_of(bounded(amax, ub), eps)
    scale = factor[:, None]  # noqa: F841
    inverse = reciprocal(factor)[:, None]
    for i in range(input.shape[0]):
        output[i] = quantized(ntl.cast(input[i], ntl.float32), inverse)


def config(variant):
    return CONFIGS[dict(variant.switches)["group"]]


def premake(ndim, dtype, group="128", rows=16, block_size=1024):
    input = Tensor(ndim, dtype=dtype, other=0)
    scale, output = Tensor(ndim, dtype="fp32"), Tensor(ndim, dtype=E4M3)
    tensors = (input, scale, Tensor(0, dtype="fp32"), Tensor(0, dtype="fp32"), output)
    if group == "row":
        arrange = functools.partial(arrangement_row, rows=rows, block_size=block_size)
        return arrange, application_row, tensors
    return functools.partial(arrangement_group, rows=rows), application_group, tensors
