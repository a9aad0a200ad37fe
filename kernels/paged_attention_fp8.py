"""paged_attention_fp8: paged_attention (FlashAttention's inference attention over
ragged batches, paged and dense caches) over an FP8 KV cache: keys and values stored as
float8_e4m3fn times the reciprocals of their scales (float32 dequantization factors, a
value per request and key/value head: FlashAttention 3's k_descale and v_descale of
shape (batch, heads_k), a scale per tensor or per head where they are expanded), queries,
new entries and results in fp16 or bf16. flash_attn_varlen_func and
flash_attn_with_kvcache (aot/runtime/_flash_attn.py) call it when their caches are FP8.

The kernel is paged_attention's (_lib/paged.py: the cache's tiles widened to fp16 before
the products, queries and probabilities in fp16 too, accumulating in fp32; the scales
folded into the scores' factor and the result; new entries quantized as they are
written, saturated to +-448 as _lib/fp8.py's quantization does). Built for the arches
with FP8 conversions; the configurations are paged_attention's decode, prefill and
prefill-long ones, without tensor descriptors or the Gluon kernel (whose tiles are the
half types').
"""

import ninetoothed
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FP8_ARCHES, FP8_NOTE, Bucket, Tuning, VariantSpace

from . import paged_attention

# ninetoothed copies into a kernel the Triton functions of its application's module:
# `attend_paged` and every function it calls are imported by name.
from ._lib.fp8 import E4M3, quantized, reciprocal  # noqa: F401
from ._lib.paged import (  # noqa: F401
    as_cached,
    attend_block,
    attend_paged,
    block_row,
    finish,
    fold_keys,
    key_length,
    key_rows,
    keys_by_descriptor,
    page_numbers,
    query_start,
    request_of,
)
from ._lib.paged_split import balanced_item, combine  # noqa: F401
from ._lib.parts import arrive, claim, leave_rows, merged_rows, partial_results  # noqa: F401

DECODE_QUERIES = paged_attention.DECODE_QUERIES

SPACE = VariantSpace(
    dtypes=("fp16", "bf16"),
    ndims=(3,),
    switches={"head_dim": ("64", "128", "256")},
    coalesce="none",
    unspecialized=(*paged_attention.SPACE.unspecialized, "k_scales", "v_scales"),
    # As paged_attention's: an FP8 cache of 2^31 elements (2 GiB) or more takes the
    # 64-bit kernels.
    specs=("aligned", "wide-aligned", "wide"),
    in_place=False,
    workspace="workspace",
    launch_id="launch",
    # Read by pointer here (no TMA on FP8 caches), declared as paged_attention's: the
    # same layouts take the same specialisations.
    descriptors=paged_attention.SPACE.descriptors,
    dims={
        **paged_attention.SPACE.dims,
        "k_scales": (None, "heads_kv"),
        "v_scales": (None, "heads_kv"),
    },
    arches=FP8_ARCHES,
    arches_note=FP8_NOTE,
)

API = Api(
    "(Tensor query, Tensor key, Tensor value, Tensor? cu_seqlens_q=None,"
    " Tensor? seqused_k=None, Tensor? cu_seqlens_k=None, Tensor? block_table=None,"
    " Tensor? key_new=None, Tensor? value_new=None, int max_seqlen_q=-1,"
    " float? softmax_scale=None, bool causal=False, int window_left=-1, int window_right=-1,"
    " float softcap=0.0, int num_splits=0, Tensor? k_descale=None, Tensor? v_descale=None)",
    "ntops_prebuilt._paged_reference.reference",
    wrapper="_flash_attn",
    returns="(Tensor, Tensor)",
    mutates=("key", "value"),
    doc="Attention over an FP8 (e4m3fn) paged or dense KV cache: (out, softmax_lse).",
    # paged_attention's, against the reference over the same FP8 values and scales.
    tolerance={"fp16": (1e-2, 1e-2), "bf16": (1.6e-2, 1e-2)},
    samples=(
        sample(
            query=(2, 3, 8, 64),
            key=(2, 40, 2, 64),
            value=(2, 40, 2, 64),
            causal=True,
            k_descale=(1, 2),
            v_descale=(1, 2),
            float8=("key", "value"),
            float32=("k_descale", "v_descale"),
        ),
        sample(
            query=(1, 1, 32, 128),
            key=(1, 300, 8, 128),
            value=(1, 300, 8, 128),
            float8=("key", "value"),
        ),
    ),
)

# paged_attention's buckets less its tensor-descriptor and Gluon ones: the launcher
# sends FP8 prefill calls to `prefill` or `prefill-long`.
TUNING = Tuning(
    function="paged_attention_fp8",
    reference="",
    key=("plan", -1),
    buckets=(
        Bucket("decode", DECODE_QUERIES),
        Bucket("prefill", paged_attention.BY_DESCRIPTOR),
        Bucket("prefill-long"),
    ),
)
config = paged_attention.config
workspace = paged_attention.workspace
arrangement = paged_attention.arrangement


# paged_attention's application with the scales' pointers and strides where it passes
# placeholders: ninetoothed takes an application's parameters as the kernel's, one per
# premake tensor, so the two cannot share one.
def application(
    plan, output, query, key, value, key_new, value_new, cu_seqlens_q, k_starts, k_lens,
    block_table, lse, k_scales, v_scales, scale, softcap, left, right, q_len, k_len,
    packed_k, cumulative, page_size, appended, min_chunk, batch, workspace, launch, block_m,
    block_n, block_d, parts, tma,
):  # fmt: skip
    attend_paged(
        query.source.data_ptr(), output.source.data_ptr(), key.source.data_ptr(),
        value.source.data_ptr(), key_new.source.data_ptr(), value_new.source.data_ptr(),
        cu_seqlens_q.source.data_ptr(), k_starts.source.data_ptr(), k_lens.source.data_ptr(),
        block_table.source.data_ptr(), lse.source.data_ptr(), workspace.source.data_ptr(),
        launch, k_scales.source.data_ptr(), v_scales.source.data_ptr(), scale, softcap, left,
        right, q_len, k_len, packed_k, cumulative, page_size, appended, min_chunk, batch,
        query.source.shape[0],
        query.source.shape[1], key.source.shape[2], query.source.shape[2],
        plan.source.shape[2], key.source.shape[0], block_table.source.shape[1],
        key.source.shape[1], query.source.stride(0), query.source.stride(1),
        output.source.stride(0), output.source.stride(1), key.source.stride(0),
        key.source.stride(1), key.source.stride(2), value.source.stride(0),
        value.source.stride(1), value.source.stride(2), key_new.source.stride(0),
        key_new.source.stride(1), key_new.source.stride(2), value_new.source.stride(0),
        value_new.source.stride(1), value_new.source.stride(2), block_table.source.stride(0),
        lse.source.stride(0), lse.source.stride(1), lse.source.stride(2),
        k_scales.source.stride(0), k_scales.source.stride(1),
        block_m, block_n, block_d, parts, tma,
    )  # fmt: skip


def premake(
    ndim, dtype, head_dim="128", block_size_m=16, block_size_n=64, block_size_d=128, parts=1,
    tma=False, gluon=0, spec=None,
):  # fmt: skip
    """paged_attention's tensors with FP8 caches (key, value) and their scales after
    the log-sum-exp; no tensor descriptors."""
    arrange, _, tensors = paged_attention.premake(
        ndim, dtype, head_dim, block_size_m, block_size_n, block_size_d, parts, False, 0, spec
    )
    float32 = ninetoothed.float32
    cache = (Tensor(4, dtype=E4M3), Tensor(4, dtype=E4M3))
    scales = (Tensor(2, dtype=float32), Tensor(2, dtype=float32))
    # plan, output, query | key, value | key_new .. lse | scales | the rest
    tensors = (*tensors[:3], *cache, *tensors[5:12], *scales, *tensors[12:])
    return arrange, application, tensors
