"""w8a8_block_fp8_matmul: FP8 (e4m3fn) products with 128-block scales, vLLM's function
for DeepSeek-style checkpoints: input (M, K) quantized per row and group of 128
(per_token_group_quant_fp8), weight (N, K) in nn.Linear's layout per 128 x 128 block,
output (M, N) = sum over K blocks of the blocks' products times their scales, in fp32,
stored in `output_dtype` (torch._scaled_mm refuses this scaling on sm_90). The tile loop
is _lib/block_products.py's; aot/runtime/_scaled_mm.py hands the weight over transposed
(a view). Declared tiles per bucket of rows, not tuned."""

import functools

from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FP8_ARCHES, FP8_NOTE, Bucket, Tuning, VariantSpace

from ._lib import products

# ninetoothed copies into a kernel the Triton functions of its application's module:
# the tile loop and every function it calls are imported by name.
from ._lib.block_products import block_scaled_product
from ._lib.products import descriptor_of, load_tile, operands, tile_of, tma_stride  # noqa: F401
from .tuning import products as tuning

SPACE = VariantSpace(
    dtypes=("fp8e4m3",),
    ndims=(2,),
    switches={"output_dtype": ("bf16", "fp16", "fp32")},
    coalesce="none",
    unit_dims={"input": (1,), "weight": (1, 0)},
    unspecialized=("input_scale", "weight_scale"),
    dims={
        "input": ("rows", "inner"),
        "weight": ("inner", "columns"),
        "input_scale": ("rows", "blocks"),
        "weight_scale": ("column_blocks", "blocks"),
        "output": ("rows", "columns"),
    },
    in_place=False,
    descriptors=("input", "weight"),  # Hopper's tiles load them by TMA
    arches=FP8_ARCHES,
    arches_note=FP8_NOTE,
)

API = Api(
    "(Tensor input, Tensor weight, Tensor input_scale, Tensor weight_scale,"
    " int[] block_size, ScalarType? output_dtype=None)",
    "ntops_prebuilt._scaled_mm.block_reference",
    wrapper="_scaled_mm",
    # Against a float64 product of the same blocks: the result's rounding and the FP8
    # tensor cores' sums of each block (tests/ops/w8a8_block_fp8_matmul.py's bound).
    tolerance={"fp8e4m3": (1.6e-2, 2e-2)},
    samples=(
        sample(
            input=(37, 256),
            weight=(96, 256),
            input_scale=(37, 2),
            weight_scale=(1, 2),
            block_size=[128, 128],
            output_dtype="bfloat16",
            float32=("input_scale", "weight_scale"),
        ),
        sample(
            input=(5, 384),
            weight=(256, 384),
            input_scale=(5, 3),
            weight_scale=(2, 3),
            block_size=[128, 128],
            float32=("input_scale", "weight_scale"),
        ),
    ),
    doc="FP8 products with 1 x 128 activation and 128 x 128 weight scales.",
)

TUNING = Tuning(
    function="w8a8_block_fp8_matmul",
    reference="",
    key=("input", -2),
    buckets=(Bucket("decode", 64), Bucket("medium", 256), Bucket("prefill")),
)


def config(variant, bucket):
    """K steps of 128 (one block of scales each) and at most 128 columns (one weight
    block). Decode sizes: 64 x 64 tiles through plain loads; then TMA where the arch has
    it, 64 rows to 256, 128 above."""
    big = variant.arch in ("sm_90", "sm_100")
    tma = variant.arch in ("sm_90", "sm_100", "sm_120")
    if bucket == "decode":
        return tuning.tiles(64, 64, 128, 4, 5 if big else 3, tma=False)
    if bucket == "medium":
        return tuning.tiles(64, 128, 128, 4, 5 if big else 3, tma=tma)
    return tuning.tiles(128, 128, 128, 8, 4 if big else 2, tma=tma)


def arrangement(input, weight, input_scale, weight_scale, output, *constants, **blocks):
    """One program per output tile; the scales read through their pointers."""
    left, right, output = products.arrange(input, weight, output, **blocks)
    scales = (tensor.tile((1, 1)) for tensor in (input_scale, weight_scale))
    return (left, right, *scales, output, *constants)


# The tile loop over the source tensors. No docstring: ninetoothed would copy it in.
def application(
    input, weight, input_scale, weight_scale, output,
    block_m, block_n, block_k, group_m, tma, a_t, b_t,
):  # fmt: skip
    block_scaled_product(
        input.source.data_ptr(), input.source.shape[0], input.source.shape[1],
        input.source.stride(0), input.source.stride(1),
        weight.source.data_ptr(), output.source.shape[1],
        weight.source.stride(0), weight.source.stride(1),
        output.source.data_ptr(), output.source.stride(0), output.source.stride(1),
        input_scale.source.data_ptr(), input_scale.source.stride(0),
        input_scale.source.stride(1),
        weight_scale.source.data_ptr(), weight_scale.source.stride(0),
        weight_scale.source.stride(1),
        block_m, block_n, block_k, group_m, tma, a_t, b_t,
    )  # fmt: skip


def premake(ndim, dtype, output_dtype="fp16", spec=None, **config):
    blocks = {name: config[name] for name in ("block_size_m", "block_size_n", "block_size_k")}
    pair = (Tensor(2, dtype=dtype, other=0), Tensor(2, dtype=dtype, other=0))
    scales = (Tensor(2, dtype="fp32"), Tensor(2, dtype="fp32"))
    output = Tensor(2, dtype=output_dtype)
    fixed = products.constants(
        ndim, dtype, spec, (0, 1), "tf32", *blocks.values(), config.get("group_size_m", 8),
        config.get("tma", False), False, False, False,
    )  # fmt: skip
    chosen = fixed[:7]  # block sizes, grouping, TMA and the operands' layouts
    return functools.partial(arrangement, **blocks), application, (*pair, *scales, output, *chosen)
