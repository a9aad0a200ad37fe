"""FlashAttention's inference functions on kernels/paged_attention.py's kernel:
flash_attn_varlen_func (ragged batches packed along the tokens, keys packed or in a
paged cache) and flash_attn_with_kvcache (decode and short appends over a dense or
paged cache, the new entries written by the same launch), with FlashAttention's
arguments, semantics and results; both call `paged_attention`, one torch.library op
whose schema declares the cache writes.

An FP8 cache (float8_e4m3fn keys and values, with FlashAttention 3's k_descale and
v_descale) goes to `paged_attention_fp8`, the same kernel built for FP8 arches.

Every call is checked before anything is written (_paged_checks.py): shapes, dtypes,
devices, the page table's and the lengths' shapes and dtypes, head dims. What only GPU
memory holds (a page number past the cache, a length past the table) cannot make the
kernel read or write outside the cache: it clamps every index.
NTOPS_PREBUILT_CHECK_PAGES=1 also reads them back (a host synchronisation) and names the
request at fault.

Launches depend on shapes only (no host synchronisation, no allocation sized by the
lengths' values), so calls with fixed-shape tables can be captured in CUDA graphs.
"""

import functools
import math
import os

import torch

from . import _C
from . import _checks as check
from . import _paged_checks as checks
from ._C import SubclassError
from ._library import compiling, fake, increment_versions, routed, traced

_launch = _C.launch
_OP = "paged_attention"
_FP8_OP = "paged_attention_fp8"
_GROUPS = {int(head_dim): group for (head_dim,), group in check.groups(_OP, "head_dim").items()}
_FP8_GROUPS = {
    int(head_dim): group for (head_dim,), group in check.groups(_FP8_OP, "head_dim").items()
}
# kernels/paged_attention.py's DECODE_QUERIES and UNIT_ROWS (tests/unit keeps them equal):
# calls of up to 8 queries per request split their keys; the grid counts 16-row units.
DECODE_QUERIES = 8
BY_DESCRIPTOR = 10
LONG_ROWS = 11
WARP_SPECIALIZED = 12
WARP_SPECIALIZED_WIDE = 13
LONG_QUERIES = 128
# Requests the Gluon kernel takes on average at least (H100 against FlashInfer, one run:
# 8 of 1473 queries on average 0.95-0.96x where the Triton kernels gave 0.66-0.83x; 64 of
# 300 0.80x (the standalone kernel) where they gave 0.85-0.87x; between the two not
# measured).
GLUON_QUERIES = 512
_UNIT_ROWS = 16
# Decode's split (`_parts`): kernels/paged_attention.py's most parts, and how many its
# merge takes in one round of loads; the keys a part of the longest request aims at; the
# fewest keys of a part where every multiprocessor has one tile; how many programs per
# multiprocessor a grid split past one round may hold; how many times over a batch-1
# step fills the multiprocessors; the programs whose partial results (8 KiB each at
# head_dim 128) a workspace holds at most. H100, against FlashInfer in one run (GQA
# 32/8): 16 parts against 64, each merged in one round, batch-1 decodes 1.08-1.09x
# against 0.92-0.98x; one 32k request alone in 32 parts of 1k keys against 16 of 2k,
# 0.99-1.00x against 0.94-0.96x, among 7 short ones 1.00-1.01x against 0.95x (there 32
# parts, a grid of 20 programs per multiprocessor, took 68.5 us, 26 parts 59.6); 8 or
# 16 times over instead of 4, batch 8 2-8% slower with pages of 16, 2-4% faster with
# pages of 64.
_MOST_PARTS = 32
_ROUND_PARTS = 16
_PART_KEYS = 1024
_CHUNK_KEYS = 256
_GRID_PER_SM = 16
_FILL = 4
_WORKSPACE_PROGRAMS = 8192
# Decode batches whose multiprocessors number more than _BALANCED_FILL[0] and at most
# _BALANCED_FILL[1] times their tiles (key/value heads times the grid's blocks of rows,
# one more than a request's rows need each: batch 3 to 8 at 8 key/value heads on 132),
# of up to _BALANCED_BATCH requests (the kernel's lanes), balance their keys over the
# grid in the kernel (kernels/_lib/paged.py's balanced_item): parts of one size for the
# whole batch, at least _BALANCED_LEAST keys, as many as whole waves of _PROGRAMS_PER_SM
# programs a multiprocessor take (the decode kernel's at head_dim 128: 250 registers),
# twice the blocks of rows at least. H100 against FlashInfer, one run (GQA 32/8, pages
# of 16 and 64, uniform and skewed): batch 3 to 7 0.89-1.00x split per request,
# 0.98-1.03x balanced; batch 2 and 16 balanced 0.91-1.00x against 0.98-1.05x split,
# batch 1 0.92-0.97x against 1.01-1.16x; batch 32 and 64 within 2% uniform, 4-6% slower
# with one long request among short ones. Batch 8 over 5 draws of lengths each (another
# run): uniform 0.94-0.95x split (0.88x at worst) against 0.98x balanced (0.95x at
# worst), one long request among short ones 1.01x against 0.99-1.00x.
_BALANCED_FILL = (1, 6)
_BALANCED_BATCH = 64
_BALANCED_LEAST = 128
_PROGRAMS_PER_SM = 2
EXPORTS = ("flash_attn_varlen_func", "flash_attn_with_kvcache")


@functools.cache
def _multiprocessors(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def _slots(device):
    """The multiprocessors of a call's CUDA device."""
    return _multiprocessors(
        device.index if device.index is not None else torch.cuda.current_device()
    )


def _parts(heads_kv, units, capacity, device, num_splits):
    """How many parts a decode call's keys split into, and the fewest keys of a part,
    from shapes alone: enough parts that a batch-1 step fills the multiprocessors
    several times over and that the longest request the table can hold (`capacity`
    keys) splits into parts of _PART_KEYS; past the merge's one round of parts only
    for tables of more keys than a round's parts of _PART_KEYS hold, and while the
    grid holds at most _GRID_PER_SM programs per multiprocessor; no more than the
    workspace's programs allow (the counters and partial results of
    _WORKSPACE_PROGRAMS programs); at least 2, so that one long request among many
    short ones still splits. The more tiles, the more keys a part takes at least:
    short requests then take one part; with few tiles, half as few."""
    if num_splits == 1:
        return 1, 1 << 30
    slots = _slots(device)
    tiles = heads_kv * units
    parts = max(-(-_FILL * slots // tiles), -(-capacity // _PART_KEYS))
    most = _ROUND_PARTS
    if capacity > _ROUND_PARTS * _PART_KEYS:
        most = max(most, min(_MOST_PARTS, _GRID_PER_SM * slots // tiles))
    parts = max(2, min(parts, most, _WORKSPACE_PROGRAMS // tiles))
    if num_splits > 1:
        parts = min(num_splits, _MOST_PARTS)
    if 4 * tiles < slots:
        # Few tiles (batch 1 to 4 at 8 KV heads; from 3 on `_balanced` takes them):
        # parts of 128 keys or more, where 256 left short requests too few programs
        # (H100 against FlashInfer, one run: 447 keys 1.10x against 0.94-0.95x, 1500
        # keys 1.15-1.19x against 0.99-1.00x, 4770 keys within 1%; more tiles: no
        # better, batch 256 1% worse).
        return parts, _CHUNK_KEYS // 2
    return parts, _CHUNK_KEYS * max(1, tiles // slots)


def _balanced(heads_kv, units, batch, device, num_splits):
    """A decode call's (parts, min_chunk) where the kernel balances its batch's keys
    over the grid (`_BALANCED_BATCH`), or None: a grid of at least `target` programs a
    key/value head, `target` whole waves of the multiprocessors and at least twice the
    grid's blocks of rows (each block's parts round up), passed with the least part's
    keys as min_chunk -(target << 16 | least)."""
    if num_splits != 0 or batch > _BALANCED_BATCH:
        return None
    slots = _slots(device)
    low, high = _BALANCED_FILL
    if not low * heads_kv * units < slots <= high * heads_kv * units:
        return None
    wave = max(1, _PROGRAMS_PER_SM * slots // heads_kv)
    target = wave * -(-2 * units // wave)
    parts = -(-target // units)
    if heads_kv * units * parts > _WORKSPACE_PROGRAMS or target >= 1 << 15:
        return None
    return parts, -(target << 16 | _BALANCED_LEAST)


def _prefill(page_size, key, value, tokens, batch, plain):
    """The grid's `queries` dim of a prefill (or mixed) call, which picks its kernel
    (kernels/paged_attention.py's): requests of GLUON_QUERIES queries on average whose
    call the Gluon kernel does (`plain`: no window, softcap or appended entries) over
    keys it loads (`_copies`); keys tensor descriptors can load; else long requests
    (LONG_QUERIES queries each on average) in 128-row blocks, or short ones among them
    (mixed batches: 64-row blocks, which rows of one query fill less sparsely)."""
    if tokens >= GLUON_QUERIES * batch and plain:
        copies = _copies(page_size, key, value)
        if copies:
            return WARP_SPECIALIZED if copies == 16 else WARP_SPECIALIZED_WIDE
    if _by_descriptor(page_size, key, value):
        return BY_DESCRIPTOR
    return LONG_ROWS if tokens >= LONG_QUERIES * batch else DECODE_QUERIES + 1


def _copies(page_size, key, value):
    """The keys a TMA copy of the Gluon kernel takes (_lib/gluon_paged.py), or 0 where it
    cannot load them: 16 for pages of 16 and 32 keys, 64 for pages of 64 to 256 (pages of
    a power of two, one after another in the cache) and for keys in one run (packed, or a
    dense cache whose entries follow each other)."""
    if page_size == 0:
        dense = all(t.stride(0) == t.shape[1] * t.stride(1) for t in (key, value))
        return 64 if key.ndim == 3 or dense else 0
    if page_size not in (16, 32, 64, 128, 256) or not _in_a_row(page_size, key, value):
        return 0
    return 16 if page_size < 64 else 64


def _by_descriptor(page_size, key, value):
    """Whether a prefill call's keys suit the kernel that loads them through tensor
    descriptors (kernels/paged_attention.py's BY_DESCRIPTOR): unpaged, or in pages of a
    multiple of 64 keys that follow each other in the cache (each block of 64 keys one
    row range of it). The kernel checks again what it needs per block of rows."""
    if page_size == 0:
        return True
    return page_size % 64 == 0 and _in_a_row(page_size, key, value)


def _in_a_row(page_size, key, value):
    """Whether the caches' pages follow each other: page p's keys are rows p * page_size
    on of the cache seen as (pages * page_size, heads_kv, head_dim)."""
    return all(t.stride(0) == page_size * t.stride(1) for t in (key, value))


@fake(_OP)
@fake(_FP8_OP)
def _fake(query, key, value, cu_seqlens_q=None, *rest, **kwargs):
    """The results' metadata, after the checks that need no data."""
    checks.elements(_OP, query, key, value)
    if query.ndim == 3:
        lse = query.new_empty((query.shape[1], query.shape[0]), dtype=torch.float32)
    else:
        lse = query.new_empty((query.shape[0], query.shape[2], query.shape[1]), dtype=torch.float32)
    return query.new_empty(query.shape), lse


@routed(_OP)
def paged_attention(
    query,
    key,
    value,
    cu_seqlens_q=None,
    seqused_k=None,
    cu_seqlens_k=None,
    block_table=None,
    key_new=None,
    value_new=None,
    max_seqlen_q=-1,
    softmax_scale=None,
    causal=False,
    window_left=-1,
    window_right=-1,
    softcap=0.0,
    num_splits=0,
):
    """softmax(q k^T * scale) v per request: (out, softmax_lse). q: (total_q, heads,
    head_dim) with cu_seqlens_q, or (batch, seqlen, heads, head_dim); k, v: a paged
    cache (num_blocks, page_size, heads_k, head_dim) with block_table (batch,
    max_blocks), packed (total_k, heads_k, head_dim) with cu_seqlens_k, or a dense cache
    (batch, seqlen_cache, heads_k, head_dim). Key lengths: seqused_k, else cu_seqlens_k's
    differences, else the cache's. key_new, value_new (batch, seqlen_new, heads_k,
    head_dim) are written after each request's keys and attended to. causal: query i of
    a request of q queries and k keys sees keys up to i + k - q; windows as
    FlashAttention's (-1: unbounded). softmax_lse: (heads, total_q) or (batch, heads,
    seqlen), natural log, +inf for rows that see no key (their output is 0). max_seqlen_q
    picks the configuration (up to 8: decode's split keys; -1: total_q); num_splits: 0
    splits a decode's keys as shapes suggest, 1 not at all, n in at most n parts."""
    return _attend(
        _OP, query, key, value, cu_seqlens_q, seqused_k, cu_seqlens_k, block_table, key_new,
        value_new, max_seqlen_q, softmax_scale, causal, window_left, window_right, softcap,
        num_splits,
    )  # fmt: skip


@routed(_FP8_OP)
def paged_attention_fp8(
    query,
    key,
    value,
    cu_seqlens_q=None,
    seqused_k=None,
    cu_seqlens_k=None,
    block_table=None,
    key_new=None,
    value_new=None,
    max_seqlen_q=-1,
    softmax_scale=None,
    causal=False,
    window_left=-1,
    window_right=-1,
    softcap=0.0,
    num_splits=0,
    k_descale=None,
    v_descale=None,
):
    """paged_attention over an FP8 cache: key and value float8_e4m3fn, holding the
    values times the reciprocals of k_descale and v_descale (float32, (batch, heads_k)
    or what broadcasts to it: per tensor, per head; None: 1); key_new and value_new in
    the queries' dtype, quantized as they are written. (out, softmax_lse)."""
    return _attend(
        _FP8_OP, query, key, value, cu_seqlens_q, seqused_k, cu_seqlens_k, block_table,
        key_new, value_new, max_seqlen_q, softmax_scale, causal, window_left, window_right,
        softcap, num_splits, k_descale, v_descale,
    )  # fmt: skip


def _call(op, *args):
    """paged_attention's arguments from function `op` (and the FP8 cache's scales):
    checked and launched with its names in errors, or sent to the op where
    paged_attention(_fp8) would send them."""
    if compiling():
        return _traced(op, *args)
    try:
        return _attend(op, *args)
    except SubclassError:
        return _traced(op, *args)


def _traced(op, *args):
    """The torch.library op of a call: paged_attention_fp8's for an FP8 cache (the
    half-type op takes no scales)."""
    if args[1].dtype == checks.FP8:
        return traced(_FP8_OP)(*args)
    checks.scales(op, args[1], args[-2], args[-1], 0)
    return traced(_OP)(*args[:-2])


def _attend(
    op, query, key, value, cu_q, seqused_k, cu_k, table, key_new, value_new, max_seqlen_q,
    softmax_scale, causal, window_left, window_right, softcap, num_splits, k_descale=None,
    v_descale=None,
):  # fmt: skip
    fp8 = key.dtype == checks.FP8
    group = checks.features(op, query, key, value, _FP8_GROUPS if fp8 else _GROUPS)
    call = checks.prepare(op, query, key, cu_q, seqused_k, cu_k, table, key_new, value_new)
    checks.options(op, window_left, window_right, softcap, num_splits)
    scales = checks.scales(op, key, k_descale, v_descale, call.batch)
    head_dim, heads_kv = query.shape[-1], key.shape[-2]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if os.environ.get("NTOPS_PREBUILT_CHECK_PAGES") == "1":
        checks.validate(op, call, query, key)
    # Every check passed: only now may anything be allocated or written.
    packed_q = query.reshape(-1, query.shape[-2], head_dim) if query.ndim == 4 else query
    out = torch.empty_like(packed_q, memory_format=torch.contiguous_format)
    lse_shape = (
        (query.shape[1], query.shape[0])
        if query.ndim == 3
        else (call.batch, query.shape[2], call.q_len)
    )
    lse = torch.empty(lse_shape, dtype=torch.float32, device=query.device)
    if call.batch == 0 or packed_q.shape[0] == 0:
        return out.view(query.shape), lse
    units = packed_q.shape[0] * (query.shape[-2] // heads_kv) // _UNIT_ROWS + call.batch
    max_q = call.q_len if query.ndim == 4 else max_seqlen_q
    max_q = packed_q.shape[0] if max_q < 0 else max_q
    parts, min_chunk = 1, 1 << 30
    if max_q <= DECODE_QUERIES:
        balanced = _balanced(heads_kv, units, call.batch, query.device, num_splits)
        parts, min_chunk = balanced or _parts(heads_kv, units, call.keys, query.device, num_splits)
    # The grid's shape, and the bucket: queries past DECODE_QUERIES are all prefill's.
    queries = min(max(max_q, 1), DECODE_QUERIES + 1)
    if queries > DECODE_QUERIES and fp8:  # paged_attention_fp8's two prefill buckets
        queries = LONG_ROWS if packed_q.shape[0] >= LONG_QUERIES * call.batch else queries
    elif queries > DECODE_QUERIES:
        plain = window_left < 0 and (causal or window_right < 0) and softcap == 0 and not call.new
        queries = _prefill(call.page_size, key, value, packed_q.shape[0], call.batch, plain)
    plan = query.as_strided((heads_kv, units, parts, queries), (0, 0, 0, 0))
    if call.k_lens is None and call.cu_q is None and table is None:
        # a dense cache attended whole: the kernel wants an int32 tensor in each place
        call.k_lens = torch.full((call.batch,), call.keys, dtype=torch.int32, device=query.device)
        call.k_len = -1
    ints = next(t for t in (call.cu_q, call.k_lens, table) if t is not None)
    keys = key.unsqueeze(0) if key.ndim == 3 else key
    values = value.unsqueeze(0) if value.ndim == 3 else value
    new_k, new_v = call.new or (keys, values)
    if fp8 and not call.new:  # read by no program; of the queries' dtype, as new entries are
        stride = packed_q.stride(1)
        new_k = new_v = packed_q.as_strided((1, 1, heads_kv, head_dim), (0, 0, stride, 1))
    if call.new:  # the kernel writes the caches: their autograd versions move
        increment_versions((key, value))
    _launch(
        group, plan, out, packed_q, keys, values, new_k, new_v,
        ints if call.cu_q is None else call.cu_q,
        ints if call.k_starts is None else call.k_starts,
        ints if call.k_lens is None else call.k_lens,
        ints.view(1, -1) if table is None else table,
        lse.unsqueeze(0) if query.ndim == 3 else lse,
        *(scales or ()), scale, float(softcap), window_left, 0 if causal else window_right,
        call.q_len, call.k_len, call.packed, call.cumulative, call.page_size, call.appended,
        min_chunk, call.batch,
    )  # fmt: skip
    return out.view(query.shape), lse


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    *,
    seqused_k=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """flash_attn.flash_attn_varlen_func: attention over ragged batches packed along
    the tokens. q (total_q, heads, head_dim); k, v packed (total_k, heads_k, head_dim),
    or a paged cache (num_blocks, page_size, heads_k, head_dim) with block_table; each
    request's keys from cu_seqlens_k (or seqused_k, as vLLM passes them). Returns out,
    or (out, softmax_lse, None) with return_attn_probs (the probabilities themselves
    are a dropout test's, which prebuilt attention has no dropout for). `deterministic`
    holds always: split keys combine in a fixed order. An FP8 cache (k, v
    float8_e4m3fn) takes FlashAttention 3's k_descale and v_descale (float32, (batch,
    heads_k) or what broadcasts to it; None: 1); FP8 queries (q_descale) are not built."""
    op = "flash_attn_varlen_func"
    checks.refuse(op, dropout_p=dropout_p, alibi_slopes=alibi_slopes, q_descale=q_descale)
    left, right = checks.window(op, window_size)
    out, lse = _call(
        op, q, k, v, cu_seqlens_q, seqused_k, cu_seqlens_k, block_table, None, None,
        int(max_seqlen_q), softmax_scale, bool(causal), left, right, float(softcap), 0,
        k_descale, v_descale,
    )  # fmt: skip
    return (out, lse, None) if return_attn_probs else out


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
    *,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """flash_attn.flash_attn_with_kvcache: q (batch, seqlen, heads, head_dim) over a
    dense cache (batch, seqlen_cache, heads_k, head_dim) or a paged one (num_blocks,
    page_size, heads_k, head_dim) with block_table (batch, max_blocks) int32; each
    request's cached keys cache_seqlens (an int or a (batch,) int32 tensor; None: the
    whole cache). k, v (batch, seqlen_new, heads_k, head_dim) are written into the cache
    at each request's cache_seqlens by the same launch, and attended to. Returns out, or
    (out, softmax_lse) with return_softmax_lse. num_splits: 0 picks the split of the keys
    from shapes, 1 does not split, n splits into at most n parts. An FP8 cache
    (float8_e4m3fn) takes FlashAttention 3's k_descale and v_descale (float32, (batch,
    heads_k) or what broadcasts to it: a scale per tensor or per head; None: 1); k and v
    stay in q's dtype and are quantized as they are written. FP8 queries (q_descale) are
    not built."""
    op = "flash_attn_with_kvcache"
    checks.refuse(
        op, rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad, alibi_slopes=alibi_slopes, q_descale=q_descale,
    )  # fmt: skip
    left, right = checks.window(op, window_size)
    if q.ndim != 4:
        checks.fail(op, f"q must be (batch, seqlen, heads, head_dim), not {q.ndim}-D")
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        if cache_seqlens < 0:
            checks.fail(op, f"cache_seqlens must be >= 0, not {cache_seqlens}")
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    elif cache_seqlens is not None and not isinstance(cache_seqlens, torch.Tensor):
        checks.fail(
            op,
            f"cache_seqlens must be an int or an int32 tensor, not {type(cache_seqlens).__name__}",
            TypeError,
        )
    out, lse = _call(
        op, q, k_cache, v_cache, None, cache_seqlens, None, block_table, k, v, q.shape[1],
        softmax_scale, bool(causal), left, right, float(softcap), num_splits, k_descale,
        v_descale,
    )  # fmt: skip
    return (out, lse) if return_softmax_lse else out
