"""scaled_mm: output = (input * scale_a) @ (mat2 * scale_b) (+ bias), FP8 (e4m3fn)
operands, accumulated in fp32 and stored in `out_dtype` (torch._scaled_mm): a scale per
tensor or per row of input and per column of mat2 (row-wise), applied to each output
tile before the bias. mat2 is an nn.Linear weight transposed (`w.t()`, column-major),
the layout Hopper's FP8 tensor cores read; aot/runtime/_scaled_mm.py hands the scales
over as one value per row and per column (stride 0 for a scale per tensor) and a bias
as rows of stride 0.

The tile loop is the products' (_lib/products.py, `SCALED`); the configurations are
declared per bucket of rows for FP8 (K steps of 128 bytes as bf16's 64), not tuned yet:
a tuning run's samples cannot say scales.
"""

import functools

from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FP8_ARCHES, FP8_NOTE, Bucket, Tuning, VariantSpace

from ._lib import products

# ninetoothed copies into a kernel the Triton functions of its application's module: the
# tile loop and every function it calls are imported by name.
from ._lib.parts import arrive, claim, partial_results  # noqa: F401
from ._lib.products import (  # noqa: F401
    accumulate,
    descriptor_of,
    finish,
    load_tile,
    operands,
    product,
    product_part,
    tile_of,
    tma_stride,
)
from .tuning import products as tuning

SPACE = VariantSpace(
    dtypes=("fp8e4m3",),
    ndims=(2,),
    switches={"out_dtype": ("bf16", "fp16", "fp32"), "bias": ("none", "given")},
    coalesce="none",
    unit_dims={"input": (1,), "mat2": (1, 0)},
    unspecialized=("scale_a", "scale_b", "bias"),
    dims={
        "input": ("rows", "inner"),
        "mat2": ("inner", "columns"),
        "scale_a": ("rows",),
        "scale_b": ("columns",),
        "bias": ("rows", "columns"),
        "output": ("rows", "columns"),
    },
    in_place=False,
    workspace="workspace",
    launch_id="launch",
    descriptors=("input", "mat2"),  # Hopper's tiles load them by TMA
    arches=FP8_ARCHES,
    arches_note=FP8_NOTE,
)

API = Api(
    "(Tensor input, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None,"
    " Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False)",
    "ntops_prebuilt._scaled_mm.reference",
    wrapper="_scaled_mm",
    # The samples' results against a float64 product: bf16's rounding, and FP8 tensor
    # cores' sums of K steps (tests/ops/scaled_mm.py derives the bound per element).
    tolerance={"fp8e4m3": (1.6e-2, 2e-2)},
    samples=(
        sample(
            input=(37, 64),
            mat2=(64, 48),
            scale_a=(1,),
            scale_b=(1,),
            out_dtype="bfloat16",
            float32=("scale_a", "scale_b"),
        ),
        sample(
            input=(37, 64),
            mat2=(64, 48),
            scale_a=(37, 1),
            scale_b=(1, 48),
            out_dtype="bfloat16",
            float32=("scale_a", "scale_b"),
        ),
        sample(
            input=(5, 128),
            mat2=(128, 32),
            scale_a=(1,),
            scale_b=(1, 32),
            bias=(32,),
            out_dtype="float32",
            float32=("scale_a", "scale_b", "bias"),
        ),
    ),
    doc="torch._scaled_mm: FP8 products with per-tensor or row-wise scales.",
)

# Bounds on the rows, as the bf16 products' (tuning/products.py): decode steps, batched
# decode, a busy server's step, prefill chunks.
# Buckets only, no reference: a tuning run's samples cannot say scales yet.
TUNING = Tuning(
    function="scaled_mm",
    reference="",
    key=("input", -2),
    buckets=(
        Bucket("decode", 16),
        Bucket("small", 64),
        Bucket("medium", 128),
        Bucket("large", 256),
        Bucket("chunk", 512),
        Bucket("prefill"),
    ),
)
workspace = products.workspace


def config(variant, bucket):
    """Declared per bucket: FP8 tiles take K steps of 128 (a bf16 tile's 64, in bytes),
    decode's 256. Decode sizes load through plain pointers and may split K (the weight's
    rows spread over every multiprocessor); from 65 rows on, TMA tiles where the arch has
    TMA."""
    big = variant.arch in ("sm_90", "sm_100")
    tma = variant.arch in ("sm_90", "sm_100", "sm_120")
    if bucket == "decode":
        # 16 rows, bf16 decode's tiles in bytes. H200, row-wise, Llama-3-8B's qkv, o,
        # gate_up and down at 1 row, CUDA graphs, one run: 10.6 + 8.8 + 42.7 + 24.6 =
        # 86.7 us (torch._scaled_mm row-wise 125, per tensor 66; the roof 45); 64 x 64 x
        # 128 split 4 (the small bucket's) 100.4, 16 x 64 x 256 in 6 stages 86.8 (faster
        # on gate_up and down, slower on qkv), 16 x 64 x 512 115.7.
        return tuning.tiles(16, 32, 256, 4, 4, tma=False, split=2)
    if bucket == "small":
        return tuning.tiles(64, 64, 128, 4, 6 if big else 3, tma=False, split=4)
    if bucket in ("medium", "large"):
        return tuning.tiles(64, 128, 128, 4, 5 if big else 3, tma=tma, split=2)
    # An fp32 result's 128 x 256 tile staged for its store takes 128 KiB: with 3
    # stages of operands, 272 KiB where a block gets 227.
    wide = dict(variant.switches)["out_dtype"] != "fp32"
    if bucket == "chunk" or not big or not wide:
        return tuning.tiles(128, 128, 128, 8, 4 if big else 2, tma=tma)
    return tuning.tiles(128, 256, 128, 8, 3, tma=tma)


def arrangement(
    input, mat2, scale_a, scale_b, bias, output, workspace, launch, *constants, **blocks
):  # fmt: skip
    """One program per output tile; the scales and the bias read through their
    pointers in the tile loop's epilogue."""
    left, right, output = products.arrange(input, mat2, output, **blocks)
    scale_a, scale_b, bias = (
        tensor.tile((1,) * tensor.ndim) for tensor in (scale_a, scale_b, bias)
    )
    return (
        left, right, scale_a, scale_b, bias, output, products.whole(workspace), launch, *constants,
    )  # fmt: skip


# `product` over the source tensors, scaled, N from the output (see _lib/products.py's
# tile loop). No docstring: ninetoothed would copy it into the kernel.
def application(
    input, mat2, scale_a, scale_b, bias, output, workspace, launch,
    block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split, has_bias,
):  # fmt: skip
    product(
        input.source.data_ptr(), 1, input.source.shape[0], input.source.shape[1],
        0, input.source.stride(0), input.source.stride(1),
        mat2.source.data_ptr(), output.source.shape[1],
        0, mat2.source.stride(0), mat2.source.stride(1),
        output.source.data_ptr(), 0, output.source.stride(0), output.source.stride(1),
        bias.source.data_ptr(), 0, bias.source.stride(0), bias.source.stride(1),
        1.0, 1.0, workspace.source.data_ptr(), launch,
        block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split,
        has_bias, False,
        scale_a.source.data_ptr(), scale_a.source.stride(0),
        scale_b.source.data_ptr(), scale_b.source.stride(0), True,
    )  # fmt: skip


def premake(ndim, dtype, out_dtype="bf16", bias="none", spec=None, **config):
    blocks = {name: config[name] for name in ("block_size_m", "block_size_n", "block_size_k")}
    pair = (Tensor(2, dtype=dtype, other=0), Tensor(2, dtype=dtype, other=0))
    scales = (Tensor(1, dtype="fp32"), Tensor(1, dtype="fp32"))
    result = (Tensor(2, dtype=out_dtype), Tensor(2, dtype=out_dtype))  # bias, output
    fixed = products.constants(
        ndim, dtype, spec, (0, 1), "tf32", *blocks.values(), config.get("group_size_m", 8),
        config.get("tma", False), config.get("warp_specialize", False),
        config.get("flatten", False), config.get("split", 1) > 1,
    )  # fmt: skip
    has_bias = Tensor(0, constexpr=True, value=bias == "given")
    workspace, launch = Tensor(1, dtype="i32"), Tensor(0, dtype="i64")
    tensors = (*pair, *scales, *result, workspace, launch, *fixed, has_bias)
    return functools.partial(arrangement, **blocks), application, tensors
