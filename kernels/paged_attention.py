"""paged_attention: FlashAttention's inference attention over ragged batches, packed
(varlen) keys and paged or dense KV caches, which flash_attn_varlen_func and
flash_attn_with_kvcache (aot/runtime/_flash_attn.py) call. Softmax(q k^T * scale)
v per request, causal aligned to the bottom right, sliding windows, softcapping,
GQA/MQA, new cache entries appended by the same launch; the result and each row's
log-sum-exp.

The kernel is _lib/paged.py's. Head dims 64, 128 and 256 are built; the others of up to
256 (multiples of 8) run in the next one's tiles, their padding masked. fp16 and bf16,
as FlashAttention.

Two configurations, by the longest request's queries (the grid's `queries` dim):
decode (up to 8 queries: a decode or speculative step) splits each request's keys into
parts in blocks of 16 rows; prefill (and mixed batches) runs blocks of 64 rows unsplit.
"""

import ninetoothed
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.plain import Plain
from ntops_aot.aot.declare.space import Bucket, Config, Tuning, VariantSpace

from ._lib import gluon_paged

# ninetoothed copies into a kernel the Triton functions of its application's module:
# `attend_paged` and every function it calls are imported by name.
from ._lib.fp8 import quantized, reciprocal  # noqa: F401
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

# Queries per request up to which a call takes the decode configuration
# (aot/runtime/_flash_attn.py's DECODE_QUERIES; a test keeps them equal).
DECODE_QUERIES = 8
# The grid's `queries` dim past DECODE_QUERIES picks a prefill kernel (aot/runtime/
# _flash_attn.py's _prefill): 9 for 64-row blocks of gathered keys (mixed batches,
# short requests), 10 for keys tensor descriptors can load (unpaged keys, or pages of a
# multiple of 64 keys one after another in the cache: the prefill-tma bucket), 11 for
# 128-row blocks of gathered keys where requests average LONG_QUERIES queries or more
# (prefill-long). Both loops in one kernel spilled: pages of 16 and 32 ran 3-7% slower.
BY_DESCRIPTOR = DECODE_QUERIES + 2
LONG_ROWS = DECODE_QUERIES + 3
# 12 and 13: requests of 512 queries on average (aot/runtime/_flash_attn.py's
# GLUON_QUERIES) the Gluon kernel takes on Hopper (_lib/gluon_paged.py: causal or not, no
# window, softcap or appended entries), copying keys 16 at a time (pages of 16 and 32
# keys) or 64 (longer pages, a power of two, one after another in the cache; keys in one
# run); elsewhere, and for other specialisations, the 64-row kernel's configuration.
WARP_SPECIALIZED = DECODE_QUERIES + 4
WARP_SPECIALIZED_WIDE = DECODE_QUERIES + 5
LONG_QUERIES = 128
# The grid's unit: 16 rows. Request b's blocks start at cu_q[b] * group // 16 + b.
UNIT_ROWS = 16

SPACE = VariantSpace(
    dtypes=("fp16", "bf16"),
    ndims=(3,),
    switches={"head_dim": ("64", "128", "256")},
    coalesce="none",
    unspecialized=("plan", "cu_seqlens_q", "k_starts", "k_lens", "block_table", "lse"),
    # Caches of 2^31 elements or more (a server's, for a small model on a large GPU)
    # take 64-bit kernels tuned as the 32-bit ones are: the generic 64-bit kernel loads
    # element by element, unpipelined (H100, a decode of 64 requests: 14.7 ms on it,
    # 484 us on these, 344 us for a cache under 2^31 elements on the 32-bit kernel).
    # Unaligned calls (head dims not a multiple of 16) take the generic one.
    specs=("aligned", "wide-aligned", "wide"),
    in_place=False,
    workspace="workspace",
    launch_id="launch",
    # The prefill-tma and Gluon kernels load them by TMA (aligned specialisation only).
    descriptors=("query", "key", "value"),
    # plan: (heads_kv, units of 16 rows, parts, the longest request's queries up to
    # DECODE_QUERIES, or 9 to LONG_ROWS for prefill), an expanded view whose shape is the
    # grid and the bucket;
    # queries packed (tokens, heads, head_dim); caches (blocks or batch, page or
    # sequence, heads_kv, head_dim).
    dims={
        "plan": ("heads_kv", None, None, None),
        "output": ("tokens", "heads_q", "head_dim"),
        "query": ("tokens", "heads_q", "head_dim"),
        "key": (None, None, "heads_kv", "head_dim"),
        "value": (None, None, "heads_kv", "head_dim"),
        "key_new": (None, None, "heads_kv", "head_dim"),
        "value_new": (None, None, "heads_kv", "head_dim"),
        "lse": (None, "heads_q", None),
    },
)

API = Api(
    "(Tensor query, Tensor key, Tensor value, Tensor? cu_seqlens_q=None,"
    " Tensor? seqused_k=None, Tensor? cu_seqlens_k=None, Tensor? block_table=None,"
    " Tensor? key_new=None, Tensor? value_new=None, int max_seqlen_q=-1,"
    " float? softmax_scale=None, bool causal=False, int window_left=-1, int window_right=-1,"
    " float softcap=0.0, int num_splits=0)",
    "ntops_prebuilt._paged_reference.reference",
    wrapper="_flash_attn",
    returns="(Tensor, Tensor)",
    mutates=("key", "value"),
    doc="Attention over ragged batches and paged or dense KV caches: (out, softmax_lse).",
    # As scaled_dot_product_attention's: half-type probabilities rounded before P @ V.
    tolerance={"fp16": (1e-2, 1e-2), "bf16": (1.6e-2, 1e-2)},
    # Dense caches attended whole (the samples' tensors are random: no lengths or tables);
    # tests/ops/paged_attention.py and tests/gpu/test_flash_attn.py make the rest.
    samples=(
        sample(query=(2, 3, 8, 64), key=(2, 40, 2, 64), value=(2, 40, 2, 64), causal=True),
        sample(query=(1, 1, 32, 128), key=(1, 300, 8, 128), value=(1, 300, 8, 128)),
    ),
)


def _tiles(m, n, d, warps, stages, parts=1, tma=False):
    premake = {"block_size_m": m, "block_size_n": n, "block_size_d": d, "parts": parts}
    if tma:
        premake["tma"] = True
    return Config(premake, num_warps=warps, num_stages=stages)


def config(variant, bucket):
    """Decode: 16 rows (a GQA group's heads of one query or a few) and 128 keys a block
    in 2 stages, the keys in up to 32 parts (aot/runtime/_flash_attn.py's _parts
    chooses how many; past 16, long keys only). Prefill: 64 rows, 64 keys, 3 stages.
    head_dim 256 takes half the keys: two stages of 128 keys of 256 dims, keys and
    values, are 256 KiB.

    Swept on an H100 (2026-11-26, bf16, head_dim 128, 32/8 heads, pages of 16 and 64,
    .device sweeps of tests/benchmarks/bench_paged_attention.py's cases), after the
    unmasked loop was pipelined (_lib/paged.py's attend_block): decode 128 keys in 3 stages
    within 2% (6% faster with one long request among 255 short ones), 64 keys in 4
    stages 0.88-0.93x, 256 keys 0.72-0.87x (spills), 8 warps 0.71-0.80x; a 64-row
    wgmma tile with 16 live rows 0.86-0.91x (tensor-core tiles of one warpgroup spill
    the accumulator, scores and probabilities of 64 rows). Prefill: 128 rows in 8 warps
    0.97-1.03x on 8 ragged prefills but 0.60x on a prefill chunk beside 63 decodes
    (rows of one query fill a 128-row block to a thirty-second), 4 stages within 1%,
    64 x 128 0.79x, 64 rows in 8 warps 0.54x. Second round (same machine and cases): 64
    x 32 in 4 stages 0.74-0.76x (229 registers against 255, but twice the iterations);
    with the page numbers loaded a block ahead (_lib/paged.py's attend_block), which
    gives three stages three buffers where the table's copy took one: prefill in 2
    stages 0.86-0.89x, decode in 3 stages 0.64-1.00x (two buffers of 128 keys leave room
    for one program per multiprocessor), 64 keys in 3 stages 0.86-0.98x; 128 rows in 8
    warps 1.13-1.14x on 8 ragged prefills over pages of 16 and 32 (so prefill-long),
    0.96-0.97x with TMA, 0.73-0.77x on the mixed batch; in 2 stages 0.83-0.91x, in 4
    stages 0.89x, 128 x 128 in 2 stages 0.90-0.91x."""
    head_dim = int(dict(variant.switches)["head_dim"])
    wide = head_dim > 128
    small_shared = variant.arch in ("sm_86", "sm_89", "sm_120")
    if bucket == "decode":
        block_n = 64 if wide or small_shared else 128
        if wide and small_shared:
            block_n = 32
        return _tiles(UNIT_ROWS, block_n, head_dim, 4, 2, parts=32)
    if wide:
        return _tiles(64, 32, head_dim, 8, 2)
    if bucket == "prefill-long" and variant.arch == "sm_90":
        return _tiles(128, 64, head_dim, 8, 3)
    if bucket.startswith("prefill-gluon"):  # the Gluon kernel's where `plain` gives it
        config = _tiles(64, 64, head_dim, 4, 2 if small_shared else 3)
        copy = 64 if bucket == "prefill-gluon-wide" else 16  # keys a TMA copy
        return Config({**config.premake, "gluon": copy}, num_warps=4, num_stages=config.num_stages)
    tma = bucket == "prefill-tma" and variant.arch == "sm_90"
    return _tiles(64, 64, head_dim, 4, 2 if small_shared else 3, tma=tma)


# Buckets only: the launcher tells decode from prefill by the grid's `queries` dim. No
# sample calls (a tuning run's operands cannot say lengths and page tables): the
# configurations were swept by tests/benchmarks/bench_paged_attention.py instead.
TUNING = Tuning(
    function="paged_attention",
    reference="",
    key=("plan", -1),
    buckets=(
        Bucket("decode", DECODE_QUERIES),
        Bucket("prefill", DECODE_QUERIES + 1),
        Bucket("prefill-tma", BY_DESCRIPTOR),
        Bucket("prefill-long", LONG_ROWS),
        Bucket("prefill-gluon", WARP_SPECIALIZED),
        Bucket("prefill-gluon-wide"),
    ),
)


def workspace(config):
    """Split configurations: per program, a counter (int64), then its partial result:
    each row's running maximum and sum and fp32 accumulator."""
    parts = config.premake.get("parts", 1)
    if parts <= 1:
        return (0, 0)
    rows, width = config.premake["block_size_m"], config.premake["block_size_d"]
    return (8 + 4 * rows * (2 + width), 0)


def arrangement(plan, *rest, block_size_m):
    """The grid: (heads_kv, units of 16 rows by block_size_m's, parts); the tensors are
    read through their pointers (`attend_paged`)."""
    grid = plan.tile((1, block_size_m // UNIT_ROWS, 1, WARP_SPECIALIZED_WIDE))
    return (grid, *(t.tile((1,) * t.ndim) if t.ndim else t for t in rest))


def application(
    plan, output, query, key, value, key_new, value_new, cu_seqlens_q, k_starts, k_lens,
    block_table, lse, scale, softcap, left, right, q_len, k_len, packed_k, cumulative,
    page_size, appended, min_chunk, batch, workspace, launch, block_m, block_n, block_d, parts,
    tma,
):  # fmt: skip
    attend_paged(
        query.source.data_ptr(), output.source.data_ptr(), key.source.data_ptr(),
        value.source.data_ptr(), key_new.source.data_ptr(), value_new.source.data_ptr(),
        cu_seqlens_q.source.data_ptr(), k_starts.source.data_ptr(), k_lens.source.data_ptr(),
        block_table.source.data_ptr(), lse.source.data_ptr(), workspace.source.data_ptr(),
        launch, lse.source.data_ptr(), lse.source.data_ptr(), scale, softcap, left, right,
        q_len, k_len, packed_k, cumulative, page_size, appended, min_chunk, batch,
        query.source.shape[0],
        query.source.shape[1], key.source.shape[2], query.source.shape[2],
        plan.source.shape[2], key.source.shape[0], block_table.source.shape[1],
        key.source.shape[1], query.source.stride(0), query.source.stride(1),
        output.source.stride(0), output.source.stride(1), key.source.stride(0),
        key.source.stride(1), key.source.stride(2), value.source.stride(0),
        value.source.stride(1), value.source.stride(2), key_new.source.stride(0),
        key_new.source.stride(1), key_new.source.stride(2), value_new.source.stride(0),
        value_new.source.stride(1), value_new.source.stride(2), block_table.source.stride(0),
        lse.source.stride(0), lse.source.stride(1), lse.source.stride(2), 0, 0,
        block_m, block_n, block_d, parts, tma,
    )  # fmt: skip


def premake(
    ndim, dtype, head_dim="128", block_size_m=16, block_size_n=64, block_size_d=128, parts=1,
    tma=False, gluon=0, spec=None,
):  # fmt: skip
    plan = Tensor(4, dtype=dtype)
    output, query = Tensor(3, dtype=dtype), Tensor(3, dtype=dtype)
    caches = tuple(Tensor(4, dtype=dtype) for _ in range(4))
    int32 = ninetoothed.int32
    tables = (Tensor(1, dtype=int32), Tensor(1, dtype=int32), Tensor(1, dtype=int32))
    block_table, lse = Tensor(2, dtype=int32), Tensor(3, dtype=ninetoothed.float32)
    scalars = (Tensor(0, dtype=ninetoothed.float32), Tensor(0, dtype=ninetoothed.float32))
    scalars += tuple(Tensor(0, dtype=int32) for _ in range(10))
    workspace, launch = Tensor(1, dtype=int32), Tensor(0, dtype=ninetoothed.int64)
    # TMA where the specialisation guarantees what descriptors need (16-byte aligned
    # pointers and strides, unit-stride head_dim, 32-bit offsets).
    aligned = spec is not None and spec.aligned and spec.width == 32
    tma = bool(tma) and aligned and dtype in ("fp16", "bf16") and spec.unit[3:5] == (3, 3)
    fixed = tuple(
        Tensor(0, constexpr=True, value=value)
        for value in (block_size_m, block_size_n, block_size_d, parts, tma)
    )
    tensors = (
        plan, output, query, *caches, *tables, block_table, lse, *scalars, workspace, launch,
        *fixed,
    )  # fmt: skip

    def arrange(*args):
        return arrangement(*args, block_size_m=block_size_m)

    return arrange, application, tensors


def plain(variant, config, spec):
    """Long requests on Hopper (the prefill-gluon buckets; the launcher routes there only
    what it does), head dims 64 and 128, in the aligned 32-bit specialisation (TMA's
    needs): the Gluon kernel (_lib/gluon_paged.py), 128 queries of a request and head a
    program, keys in blocks of 128 through two stages, `gluon` keys a copy. The rest keep
    the generated one."""
    if not config.premake.get("gluon") or variant.arch != "sm_90":
        return None
    if dict(variant.switches)["head_dim"] not in ("64", "128"):
        return None
    if not (spec.aligned and spec.width == 32 and spec.unit[1:5] == (2, 2, 3, 3)):
        return None
    rows = gluon_paged.ROWS.value
    grid = f"(query_size_0 // {rows} + block_table_size_0 + cu_seqlens_q_size_0) * query_size_1"
    constants = {"BLOCK_N": 128, "STAGES": 2, "COPY": config.premake["gluon"]}
    return Plain(gluon_paged.paged_prefill, grid, constants)
