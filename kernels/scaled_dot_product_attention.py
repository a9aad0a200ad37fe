"""scaled_dot_product_attention: softmax(query key^T * scale + mask) value, computed a
block of keys at a time with a running maximum and sum (flash attention), in fp32.

Rows, not heads, are the unit of work: the query heads that share a key/value head
(grouped-query attention) and their queries are one list of group * seq_q rows, so a
block of rows reads each key block once for the whole group. The runtime passes the
output as (batch, heads_kv, group * seq_q, head_dim), a view of the contiguous
(batch, heads_q, seq_q, head_dim) result; programs cover (batch, key/value head,
block of rows). The arrangement gives that grid; the work is `attend`, a Triton
function the applications call with the tensors' pointers, sizes and strides.

Two configurations, picked per call by the number of queries (the buckets):
- decode (up to 16 queries): the keys are split into parts (flash decoding), so a
  batch-1 decode still runs a program per multiprocessor; the launcher picks the parts
  per call from the grid (`split`), and the last part of a block of rows to finish
  merges the parts' partial results.
- prefill: flash attention 2. Causal blocks of keys wholly below the diagonal run
  without mask arithmetic, only the diagonal ones are masked and those above it are
  never read; the scale is folded into base-2 exponents. On Hopper the keys and values
  load through TMA descriptors made on the device (aligned half-type calls).

Head dims 32, 64, 96, 128 and 256: a head_dim that is not a power of two runs in the next
one's tiles, its padding masked (TMA fills it with zeros).

`mask` is one switch: none, causal (with an offset: 0 for the upper-left variant,
seq_kv - seq_q for lower-right), or a bool or float tensor broadcast to
(batch, heads_q, seq_q, seq_kv). Rows with every key masked give 0. Products are
IEEE ("ieee" input precision), as torch's fp32 attention computes them: fp32 inputs
never go through TF32; for fp16 and bf16 the precision changes nothing.
"""

import functools

import ninetoothed
import triton
import triton.language as tl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Bucket, Config, Operand, Tuning, VariantSpace

from ._lib.parts import arrive, claim, partial_results

MASKS = ("none", "causal", "bool", "float")
SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(4,),
    switches={"head_dim": ("32", "64", "96", "128", "256"), "mask": MASKS},
    coalesce="none",
    unspecialized=("mask",),
    specs=("aligned", "generic", "wide"),
    in_place=False,
    workspace="workspace",
    launch_id="launch",
    # What the launcher checks: the kernels are built for one head_dim; the output is
    # (batch, heads_kv, group * seq_q, head_dim), the query heads that share a key/value
    # head one after another; the mask is broadcast to (batch, heads_q, seq_q, seq_kv);
    # the new cache entries (or the caches themselves) have the caches' heads.
    dims={
        "output": ("batch", "heads_kv", "heads_q/heads_kv*seq_q", "head_dim={head_dim}"),
        "query": ("batch", "heads_q", "seq_q", "head_dim={head_dim}"),
        "key": ("batch", "heads_kv", "seq_kv", "head_dim={head_dim}"),
        "value": ("batch", "heads_kv", "seq_kv", "head_dim={head_dim}"),
        "present_key": ("batch", "heads_kv", None, "head_dim={head_dim}"),
        "present_value": ("batch", "heads_kv", None, "head_dim={head_dim}"),
        "mask": ("batch", "heads_q", "seq_q", "seq_kv"),
    },
)

API = Api(
    "(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0,"
    " bool is_causal=False, float? scale=None, bool enable_gqa=False, int? causal_variant=None,"
    " Tensor? present_key=None, Tensor? present_value=None, Tensor? present_key_slot=None,"
    " Tensor? present_value_slot=None)",
    "torch.nn.functional.scaled_dot_product_attention",
    wrapper="_attention",
    # torch's half-type attention rounds P to half before P @ V, as the kernel does,
    # but in another order: as the GPU suite has always allowed.
    tolerance={"fp16": (1e-2, 1e-2), "bf16": (1.6e-2, 1e-2)},
    samples=(
        sample(query=(2, 8, 37, 64), key=(2, 8, 37, 64), value=(2, 8, 37, 64)),
        sample(query=(2, 8, 37, 128), key=(2, 8, 37, 128), value=(2, 8, 37, 128), is_causal=True),
        sample(
            query=(1, 32, 1, 128), key=(1, 8, 300, 128), value=(1, 8, 300, 128), enable_gqa=True
        ),
    ),
)

# Llama-3-8B's attention (32 query heads over 8 key/value heads) and plain multi-head
# attention, at decode (one query against a KV cache) and prefill sizes.
_GQA, _MHA = (32, 8), (32, 32)


def _sample(batch, heads, seq_q, seq_kv, head_dim=128):
    heads_q, heads_kv = heads
    return (
        Operand((batch, heads_q, seq_q, head_dim)),
        Operand((batch, heads_kv, seq_kv, head_dim)),
        Operand((batch, heads_kv, seq_kv, head_dim)),
    )


# Decode splits by the cache's length too: up to 2048 keys a batch-1 step is a few
# microseconds, where how finely the keys split sets the time.
SHORT_CACHE = 2048


def _decode(batches, lengths):
    return tuple(
        _sample(batch, heads, 1, seq_kv)
        for batch in batches
        for seq_kv in lengths
        for heads in (_GQA, _MHA)
    )


TUNING = Tuning(
    function="scaled_dot_product_attention",
    reference="nn.functional.scaled_dot_product_attention",
    key=("query", -2),
    key2=("key", -2),
    buckets=(
        Bucket("decode", 16, _decode((1, 8, 32), (1024, 2048)), SHORT_CACHE),
        Bucket("decode-long", 16, _decode((1, 8), (4096, 32768)) + _decode((32,), (4096,))),
        Bucket("prefill", None, (_sample(1, _GQA, 2048, 2048), _sample(4, _MHA, 4096, 4096))),
    ),
    specs=("i32-u333333-a16", "i32-u333333x-a16"),
    options={"enable_gqa": True},
    switch_options={"mask": {"causal": {"is_causal": True}}},
)


def config(variant, bucket):
    """The declared default of each bucket, per arch; tuning tables replace them.
    head_dim 256 takes narrower key blocks: 64 keys of 256 dims are 32 KiB in half
    types, per operand and stage."""
    head_dim = int(dict(variant.switches)["head_dim"])
    block_d = triton.next_power_of_2(head_dim)
    wide = block_d > 128
    small_shared = variant.arch in ("sm_86", "sm_89", "sm_120")
    if bucket.startswith("decode"):
        if variant.arch == "sm_90" and variant.dtype != "fp32" and not wide:
            # H100 tuning runs (2026-11-23, bf16, head_dim 128, batch 1-32, GQA and MHA):
            # 64 keys a block in up to 16 parts led both buckets by 1-3%. With the merge
            # in one round of loads, 1.04-1.12x torch at batch 1, 0.98-1.09x at 8 and 32
            # (0.98-1.00 over 134 MB of keys and more: bandwidth-bound); TMA loads 1-5% slower.
            return tiles(16, 64, block_d, 4, 3, split=16)
        # Two stages where a block gets 99 KiB: three of fp32 keys and values in 64-key
        # blocks of 128 dims took 143 KiB.
        block_n = 16 if wide and variant.dtype == "fp32" else 32 if wide else 64
        return tiles(16, block_n, block_d, 4, 2 if small_shared else 3, split=16)
    if variant.dtype == "fp32":
        # IEEE fp32 products are FMA loops unrolled over the tile: 64x32 tiles made
        # the fp32 variants a sixth of an sm_90 build (34 s each for head_dim 128,
        # 19 s in 32x32).
        return tiles(32, 16 if wide else 32, block_d, 4, 1 if small_shared else 2)
    if wide:
        return tiles(64, 32, block_d, 8, 1 if small_shared else 2)
    if variant.arch == "sm_90":
        # H100 tuning run (2026-11-23, bf16/fp16, head_dim 128, 2048 tokens of 32 heads
        # over 8 and 4x4096 of 32 over 32, Triton 3.9): 64x64 tiles in 4 warps with
        # TMA loads of keys and values reached 0.79-0.82x torch causal and 0.73-0.77x
        # not; 128x128 in 8 warps 0.70-0.76x; 64x64 without TMA 0.66-0.71x. The query's
        # block kept in registers (its product then reads only the keys from shared
        # memory) took 30-40 more registers and lost 4-7%.
        return tiles(64, 64, block_d, 4, 3, tma=True)
    block_m = 64 if small_shared and head_dim > 64 else 128
    warps = 8 if head_dim > 64 else 4
    return tiles(block_m, 64, block_d, warps, 2 if small_shared else 3)


def tiles(m, n, d, warps, stages, split=1, tma=False):
    """A configuration: blocks of m rows (queries of a group's heads) and n keys of d
    dims, TMA loads of the keys and values or plain ones, and up to `split` parts of
    the keys (decode)."""
    premake = {"block_size_m": m, "block_size_n": n, "block_size_d": d, "tma": tma}
    return Config(premake, num_warps=warps, num_stages=stages, split=split)


def candidates(variant, bucket):
    """What a tuning run tries (the default first): half types on Hopper at head_dim 128
    (the samples'); the tuner times unmasked calls, and causal ones in the prefill
    bucket."""
    default = config(variant, bucket)
    switches = dict(variant.switches)
    mask, block_d = switches["mask"], default.premake["block_size_d"]
    if (
        variant.dtype == "fp32"
        or variant.arch != "sm_90"
        or switches["head_dim"] != "128"
        or mask not in ("none", "causal")
        or (mask == "causal" and bucket != "prefill")
    ):
        return [default]
    if bucket != "prefill":
        found = [
            tiles(16, 128, block_d, 4, 3, 16),
            tiles(16, 64, block_d, 4, 3, 32),
            tiles(16, 128, block_d, 8, 3, 32),
            tiles(16, 64, block_d, 4, 4, 16),
            tiles(16, 64, block_d, 4, 3, 16),
            tiles(16, 32, block_d, 4, 4, 32),
        ]
    else:
        # Warp-specialised loops fail to compile in Triton 3.9 here (its
        # NVGPUWarpSpecialization pass), as in batched matrix products.
        found = [
            tiles(128, 128, block_d, 8, 3, tma=True),
            tiles(128, 64, block_d, 8, 3, tma=True),
            tiles(64, 128, block_d, 4, 3, tma=True),
            tiles(64, 64, block_d, 4, 2, tma=True),
            tiles(64, 64, block_d, 4, 4, tma=True),
            tiles(64, 32, block_d, 4, 3, tma=True),
        ]
    return [default, *(c for c in found if c.key != default.key)]


def workspace(config):
    """Split configurations: per program, a counter (int64: `arrive` needs no zeroed
    memory), then its partial result: the running maximum and sum of each row and
    the rows' fp32 accumulators."""
    if config.split <= 1:
        return (0, 0)
    rows, width = config.premake["block_size_m"], config.premake["block_size_d"]
    return (8 + 4 * rows * (2 + width), 0)


# ---- the kernel --------------------------------------------------------------------


@triton.jit
def fold(
    accumulator, running_max, running_sum, q, k_source, v_source, bias_base, first, origin,
    bound, sk_s, sk_d, sv_s, sv_d, sb_k, factor, rows_s, offset, columns_d, inside_d,
    BLOCK_N: tl.constexpr, MASK: tl.constexpr, BOUNDED: tl.constexpr,
    DIAGONAL: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Fold keys first .. first + BLOCK_N into the rows' running softmax-weighted sum.
    Key j lies at row j - origin of `k_source` and `v_source` (a KV cache's new entries
    are keys from `origin` on); BOUNDED: the block may run past `bound`, the keys'
    end; DIAGONAL: the causal diagonal crosses it. Scores are base-2 logits (scale *
    log2(e) applied). TMA: `k_source` and `v_source` are tensor descriptors (they fill
    rows past the bound and the padding of head_dim with zeros), else pointers."""
    columns = first + tl.arange(0, BLOCK_N)
    if TMA:  # 32-bit specialisations only: offsets fit
        k = k_source.load([first.to(tl.int32), 0])
        v = v_source.load([first.to(tl.int32), 0])
    else:
        # A whole block is masked only by a head_dim padded to a power of two.
        loaded = inside_d[None, :]
        if BOUNDED:
            loaded = (columns < bound)[:, None] & loaded
        rows = columns - origin
        keys = rows[:, None] * sk_s + columns_d[None, :] * sk_d
        k = tl.load(k_source + keys, mask=loaded, other=0.0)
        values = rows[:, None] * sv_s + columns_d[None, :] * sv_d
        v = tl.load(v_source + values, mask=loaded, other=0.0)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * factor
    if MASK < 2 and not BOUNDED and not DIAGONAL:
        # Every row sees every key of the block: no score is -inf (flash attention 2's
        # inner loop, the product accumulated in place). Folding the scale into exp2's
        # argument as one multiply-add (the maximum of the products scaled per row)
        # measured 4-9% slower on an H100 (Triton 3.9, 2026-11-23).
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        weights = tl.exp2(scores - new_max[:, None])
        decay = tl.exp2(running_max - new_max)
        accumulator = tl.dot(
            weights.to(v.dtype), v, accumulator * decay[:, None], input_precision=PRECISION
        )
        return accumulator, new_max, running_sum * decay + tl.sum(weights, 1)
    if MASK == 2:  # bool: True keeps
        bias = tl.load(bias_base + columns[None, :] * sb_k, mask=columns[None, :] < bound, other=0)
        scores = tl.where(bias != 0, scores, float("-inf"))
    if MASK == 3:  # float: added
        bias = tl.load(bias_base + columns[None, :] * sb_k, mask=columns[None, :] < bound, other=0)
        scores += bias.to(tl.float32) * 1.4426950408889634
    if BOUNDED:
        scores = tl.where(columns[None, :] < bound, scores, float("-inf"))
    if DIAGONAL:
        scores = tl.where(columns[None, :] <= rows_s[:, None] + offset, scores, float("-inf"))
    new_max = tl.maximum(running_max, tl.max(scores, 1))
    shift = tl.where(new_max == float("-inf"), 0.0, new_max)
    weights = tl.exp2(scores - shift[:, None])
    decay = tl.exp2(running_max - shift)
    accumulator = accumulator * decay[:, None] + tl.dot(
        weights.to(v.dtype), v, input_precision=PRECISION
    )
    return accumulator, new_max, running_sum * decay + tl.sum(weights, 1)


@triton.jit
def attend(
    q, k, v, o, pk, pv, bias, workspace, launch, scale, offset,
    batch, heads_kv, seq_q, seq_kv, appended, rows_total, head_dim,
    sq_b, sq_h, sq_s, sq_d, sk_b, sk_h, sk_s, sk_d, sv_b, sv_h, sv_s, sv_d,
    sp_b, sp_h, sp_s, sp_d, so_b, so_h, so_r, so_d, sb_b, sb_h, sb_s, sb_k,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    MASK: tl.constexpr, MAX_PARTS: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Attention of one block of rows (row r: query head kv_head * group + r // seq_q,
    query r % seq_q) over the keys of its part (all of them unless split: MAX_PARTS,
    a power of two, bounds the parts). MASK: 0 none, 1 causal (query i sees keys up to
    i + offset), 2 bool, 3 float tensor. TMA: keys and values load through tensor
    descriptors made on the device (16-byte aligned, unit-stride head_dim).

    The last `appended` keys and values are a KV cache's new entries, given in `pk`
    and `pv` (strides sp_*, shared): the launch writes them into the cache, each
    program a share, and every program reads them from pk and pv, never from the
    cache positions being written. A model's decode step so costs no copy kernels."""
    row_blocks = tl.cdiv(rows_total, BLOCK_M)
    tiles = batch * heads_kv * row_blocks
    pid = tl.program_id(0)
    if MAX_PARTS > 1:
        parts = tl.num_programs(0) // tiles
        tile = pid // parts
        part = pid % parts
        if parts > 1:
            claim(workspace.to(tl.pointer_type(tl.int64)) + tile, launch)
    else:
        parts = 1
        tile = pid
        part = 0
    z = tile // (heads_kv * row_blocks)
    kv_head = (tile // row_blocks) % heads_kv
    block = tile % row_blocks
    if MASK == 1:  # the longest rows first: they finish last otherwise
        block = row_blocks - 1 - block
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    live = rows < rows_total
    group = rows_total // seq_q
    rows_h = kv_head * group + tl.where(live, rows, 0) // seq_q
    rows_s = tl.where(live, rows, 0) % seq_q
    columns_d = tl.arange(0, BLOCK_D)
    inside_d = columns_d < head_dim
    cached = seq_kv - appended
    pk_head = pk + z * sp_b + kv_head * sp_h
    pv_head = pv + z * sp_b + kv_head * sp_h
    k_source = k + z * sk_b + kv_head * sk_h
    v_source = v + z * sv_b + kv_head * sv_h
    if appended > 0:
        share = block * parts + part  # of the row_blocks * parts programs of this head
        for first in tl.range(share * 16, appended, row_blocks * parts * 16):
            fresh = first + tl.arange(0, 16)
            inside = (fresh < appended)[:, None] & inside_d[None, :]
            entries = fresh[:, None] * sp_s + columns_d[None, :] * sp_d
            slots = (cached + fresh)[:, None]
            key_slots = k_source + slots * sk_s + columns_d[None, :] * sk_d
            tl.store(key_slots, tl.load(pk_head + entries, mask=inside), mask=inside)
            value_slots = v_source + slots * sv_s + columns_d[None, :] * sv_d
            tl.store(value_slots, tl.load(pv_head + entries, mask=inside), mask=inside)
    q_tile = tl.load(
        q + z * sq_b + rows_h[:, None] * sq_h + rows_s[:, None] * sq_s + columns_d[None, :] * sq_d,
        mask=live[:, None] & inside_d[None, :],
        other=0.0,
    )
    if TMA:  # over the cached keys: rows past them (new entries) load as zeros
        rows_kv = tl.maximum(cached, 1)
        k_source = tl.make_tensor_descriptor(
            k_source, [rows_kv, head_dim], [sk_s, 1], [BLOCK_N, BLOCK_D]
        )
        v_source = tl.make_tensor_descriptor(
            v_source, [rows_kv, head_dim], [sv_s, 1], [BLOCK_N, BLOCK_D]
        )
    bias_base = bias + z * sb_b + rows_h[:, None] * sb_h + rows_s[:, None] * sb_s
    factor = scale * 1.4426950408889634

    # This part's keys, whole blocks of them.
    per_part = tl.cdiv(tl.cdiv(seq_kv, BLOCK_N), parts) * BLOCK_N
    start = part * per_part
    end = tl.minimum(start + per_part, seq_kv)
    # Keys every row sees: all of them (masks aside), or below the causal diagonal of
    # the block's first query; and those some row sees (past the last query's: none).
    whole = end
    if MASK == 1:
        first_s = tl.min(tl.where(live, rows_s, seq_q))
        last_s = tl.max(tl.where(live, rows_s, 0))
        whole = tl.maximum(tl.minimum(end, first_s + offset + 1), start)
        end = tl.maximum(tl.minimum(end, last_s + offset + 1), start)
    # The cached keys' and the new entries' shares of them.
    fresh = tl.minimum(tl.maximum(cached, start), end)
    whole = tl.minimum(whole, fresh)
    unmasked = start + (whole - start) // BLOCK_N * BLOCK_N

    accumulator = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    running_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for first in tl.range(start, unmasked, BLOCK_N):
        accumulator, running_max, running_sum = fold(
            accumulator, running_max, running_sum, q_tile, k_source, v_source, bias_base, first,
            0, cached, sk_s, sk_d, sv_s, sv_d, sb_k, factor, rows_s, offset, columns_d, inside_d,
            BLOCK_N, MASK, False, False, PRECISION, TMA,
        )  # fmt: skip
    for first in tl.range(unmasked, fresh, BLOCK_N):
        accumulator, running_max, running_sum = fold(
            accumulator, running_max, running_sum, q_tile, k_source, v_source, bias_base, first,
            0, cached, sk_s, sk_d, sv_s, sv_d, sb_k, factor, rows_s, offset, columns_d, inside_d,
            BLOCK_N, MASK, True, MASK == 1, PRECISION, TMA,
        )  # fmt: skip
    # The new entries, read where they arrive (other programs write them into the cache):
    # a decode step's few, 16 at a time. Not pipelined, and in small blocks: the loops
    # above keep their registers and shared memory.
    for first in tl.range(fresh, end, 16, num_stages=1):
        accumulator, running_max, running_sum = fold(
            accumulator, running_max, running_sum, q_tile, pk_head, pv_head, bias_base, first,
            cached, end, sp_s, sp_d, sp_s, sp_d, sb_k, factor, rows_s, offset, columns_d,
            inside_d, 16, MASK, True, MASK == 1, PRECISION, False,
        )  # fmt: skip

    o_rows = o + z * so_b + kv_head * so_h + rows[:, None] * so_r + columns_d[None, :] * so_d
    stored = live[:, None] & inside_d[None, :]
    if MAX_PARTS > 1:
        if parts > 1:
            merge(
                accumulator, running_max, running_sum, workspace, launch,
                o + z * so_b + kv_head * so_h + block * BLOCK_M * so_r, so_r, so_d,
                tl.minimum(rows_total - block * BLOCK_M, BLOCK_M), head_dim, tile, part,
                parts, tl.cdiv(seq_kv, tl.maximum(per_part, 1)), BLOCK_M, BLOCK_D, MAX_PARTS,
            )  # fmt: skip
        else:
            result = tl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])
            tl.store(o_rows, result.to(o.dtype.element_ty), mask=stored)
    else:
        result = tl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])
        tl.store(o_rows, result.to(o.dtype.element_ty), mask=stored)


@triton.jit
def merge(
    accumulator, running_max, running_sum, workspace, launch, o_block, so_r, so_d, live_rows,
    head_dim, tile, part, parts, used,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, MAX_PARTS: tl.constexpr,
):  # fmt: skip
    """Split keys: leave this part's maximum, sum and accumulator of each row in the
    workspace; the last part of the block of rows to arrive rescales every part's to
    their common maximum and stores the rows (`o_block`: the block's first row, of
    `live_rows`). The sums over parts are reductions of one tile, so the result does
    not depend on who arrived when. Workspace: an int64 counter per program (one per
    block of rows in use), then each program's partial result."""
    counters = workspace.to(tl.pointer_type(tl.int64))
    partials = partial_results(workspace)
    size = BLOCK_M * (2 + BLOCK_D)
    within = tl.arange(0, BLOCK_M)
    columns = tl.arange(0, BLOCK_D)
    inside = columns < head_dim
    mine = partials + (tile * parts + part) * size
    tl.store(mine + within, running_max)
    tl.store(mine + BLOCK_M + within, running_sum)
    cells = mine + 2 * BLOCK_M + within[:, None] * BLOCK_D + columns[None, :]
    tl.store(cells, accumulator, mask=(within < live_rows)[:, None] & inside[None, :])
    tl.debug_barrier()  # every thread's part stored before the counter says so
    if arrive(counters + tile, launch) == parts:
        # Every part's partial results of a few rows at once, in one round of loads
        # (the merge is the step's tail: a loop over the parts, even pipelined, waited
        # on L2 once per part). Parts past the keys hold nothing: only the first
        # `used` are read, and of them the live rows.
        # A few rows: 8192 cells of partial results, 64 registers a thread in 4 warps.
        ROWS: tl.constexpr = 8192 // (MAX_PARTS * BLOCK_D) if MAX_PARTS * BLOCK_D < 8192 else 1
        first = partials + tile * parts * size
        others = tl.arange(0, MAX_PARTS)
        for chunk in tl.range(0, live_rows, ROWS, num_stages=1):
            rows = chunk + tl.arange(0, ROWS)
            read = (others < used)[:, None] & (rows < live_rows)[None, :]
            slots = first + others[:, None] * size + rows[None, :]
            maxima = tl.load(slots, mask=read, other=float("-inf"), cache_modifier=".cg")
            sums = tl.load(slots + BLOCK_M, mask=read, other=0.0, cache_modifier=".cg")
            rows_at = first + others[:, None] * size + 2 * BLOCK_M + rows[None, :] * BLOCK_D
            partial = tl.load(
                rows_at[:, :, None] + columns[None, None, :],
                mask=read[:, :, None] & inside[None, None, :],
                other=0.0,
                cache_modifier=".cg",
            )
            highest = tl.max(maxima, 0)
            weights = tl.exp2(maxima - tl.where(highest == float("-inf"), 0.0, highest)[None, :])
            total = tl.sum(weights * sums, 0)
            result = tl.sum(weights[:, :, None] * partial, 0)
            result = tl.where(total[:, None] == 0, 0.0, result / total[:, None])
            stored = (rows < live_rows)[:, None] & inside[None, :]
            o_rows = o_block + rows[:, None] * so_r + columns[None, :] * so_d
            tl.store(o_rows, result.to(o_block.dtype.element_ty), mask=stored)
        tl.store(counters + tile, 0)  # a graph's replay finds no count of its own


# ---- the applications: `attend` over the source tensors ---------------------------
# They live here, beside `attend`, because ninetoothed takes the Triton functions an
# application calls from the application's own module.


def application(
    output, query, key, value, present_key, present_value, appended, scale, workspace, launch,
    block_m, block_n, block_d, kind, split, precision, tma,
):  # fmt: skip
    attend(
        query.source.data_ptr(), key.source.data_ptr(), value.source.data_ptr(),
        output.source.data_ptr(), present_key.source.data_ptr(),
        present_value.source.data_ptr(), output.source.data_ptr(),
        workspace.source.data_ptr(), launch, scale, 0, output.source.shape[0],
        output.source.shape[1], query.source.shape[2], key.source.shape[2], appended,
        output.source.shape[2], query.source.shape[3],
        query.source.stride(0), query.source.stride(1), query.source.stride(2),
        query.source.stride(3), key.source.stride(0), key.source.stride(1),
        key.source.stride(2), key.source.stride(3), value.source.stride(0),
        value.source.stride(1), value.source.stride(2), value.source.stride(3),
        present_key.source.stride(0), present_key.source.stride(1),
        present_key.source.stride(2), present_key.source.stride(3),
        output.source.stride(0), output.source.stride(1), output.source.stride(2),
        output.source.stride(3), 0, 0, 0, 0,
        block_m, block_n, block_d, kind, split, precision, tma,
    )  # fmt: skip


def application_causal(
    output, query, key, value, present_key, present_value, appended, scale, offset,
    workspace, launch, block_m, block_n, block_d, kind, split, precision, tma,
):  # fmt: skip
    attend(
        query.source.data_ptr(), key.source.data_ptr(), value.source.data_ptr(),
        output.source.data_ptr(), present_key.source.data_ptr(),
        present_value.source.data_ptr(), output.source.data_ptr(),
        workspace.source.data_ptr(), launch, scale, offset, output.source.shape[0],
        output.source.shape[1], query.source.shape[2], key.source.shape[2], appended,
        output.source.shape[2], query.source.shape[3],
        query.source.stride(0), query.source.stride(1), query.source.stride(2),
        query.source.stride(3), key.source.stride(0), key.source.stride(1),
        key.source.stride(2), key.source.stride(3), value.source.stride(0),
        value.source.stride(1), value.source.stride(2), value.source.stride(3),
        present_key.source.stride(0), present_key.source.stride(1),
        present_key.source.stride(2), present_key.source.stride(3),
        output.source.stride(0), output.source.stride(1), output.source.stride(2),
        output.source.stride(3), 0, 0, 0, 0,
        block_m, block_n, block_d, kind, split, precision, tma,
    )  # fmt: skip


def application_masked(
    output, query, key, value, present_key, present_value, appended, mask, scale, workspace,
    launch, block_m, block_n, block_d, kind, split, precision, tma,
):  # fmt: skip
    """A bool or float mask tensor (`kind` 2 or 3), broadcast by its strides."""
    attend(
        query.source.data_ptr(), key.source.data_ptr(), value.source.data_ptr(),
        output.source.data_ptr(), present_key.source.data_ptr(),
        present_value.source.data_ptr(), mask.source.data_ptr(),
        workspace.source.data_ptr(), launch, scale, 0, output.source.shape[0],
        output.source.shape[1], query.source.shape[2], key.source.shape[2], appended,
        output.source.shape[2], query.source.shape[3],
        query.source.stride(0), query.source.stride(1), query.source.stride(2),
        query.source.stride(3), key.source.stride(0), key.source.stride(1),
        key.source.stride(2), key.source.stride(3), value.source.stride(0),
        value.source.stride(1), value.source.stride(2), value.source.stride(3),
        present_key.source.stride(0), present_key.source.stride(1),
        present_key.source.stride(2), present_key.source.stride(3),
        output.source.stride(0), output.source.stride(1), output.source.stride(2),
        output.source.stride(3), mask.source.stride(0), mask.source.stride(1),
        mask.source.stride(2), mask.source.stride(3),
        block_m, block_n, block_d, kind, split, precision, tma,
    )  # fmt: skip


APPLICATIONS = {
    "none": application,
    "causal": application_causal,
    "bool": application_masked,
    "float": application_masked,
}


def arrangement(output, *rest, block_size_m):
    """The grid: one program per (batch, key/value head, block of rows) of the output,
    passed as (batch, heads_kv, group * seq_q, head_dim). The other tensors are read
    through their pointers (`attend`): tiled only so that ninetoothed sees tiles."""
    tiled = [t.tile((1,) * t.ndim) if t.ndim else t for t in rest]
    return (output.tile((1, 1, block_size_m, -1)), *tiled)


def premake(
    ndim, dtype, head_dim="64", mask="none", block_size_m=64, block_size_n=64,
    block_size_d=64, split=1, tma=False, spec=None,
):  # fmt: skip
    def attention_tensor(**options):
        return Tensor(4, dtype=dtype, shape=(None, None, None, int(head_dim)), **options)

    output, query, key, value, present_key, present_value = (attention_tensor() for _ in range(6))
    scale = Tensor(0, dtype=ninetoothed.float32)
    middle = {
        "none": (scale,),
        "causal": (scale, Tensor(0, dtype=ninetoothed.int32)),
        "bool": (Tensor(4, dtype="i1"), scale),
        "float": (Tensor(4, dtype=dtype), scale),
    }[mask]
    workspace, launch = Tensor(1, dtype=ninetoothed.int32), Tensor(0, dtype=ninetoothed.int64)
    precision = "ieee"
    parts = triton.next_power_of_2(split) if split > 1 else 1
    # TMA where the specialisation guarantees what descriptors need: 16-byte aligned
    # heads and rows, head_dim of unit stride in the query, keys and values.
    aligned = spec is not None and spec.aligned and spec.width == 32
    use_tma = bool(tma) and aligned and dtype in ("fp16", "bf16") and spec.unit[1:4] == (3,) * 3
    kind = MASKS.index(mask)
    constants = (block_size_m, block_size_n, block_size_d, kind, parts, precision, use_tma)
    fixed = tuple(Tensor(0, constexpr=True, value=value) for value in constants)
    arrange = functools.partial(arrangement, block_size_m=block_size_m)
    appended = Tensor(0, dtype=ninetoothed.int32)
    present = (present_key, present_value, appended)
    tensors = (output, query, key, value, *present, *middle, workspace, launch, *fixed)
    return arrange, APPLICATIONS[mask], tensors
