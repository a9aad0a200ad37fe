"""paged_attention's checks, before anything is allocated or written: the tensors'
dtypes, devices, shapes and layouts (FlashAttention's: packed or uniform queries; packed,
dense or paged keys; int32 lengths and tables), the options, FlashAttention's arguments
prebuilt attention refuses, and NTOPS_PREBUILT_CHECK_PAGES=1's reading back of the
lengths and page tables. Errors name the arguments as the function called spells them."""

import itertools
import math

import torch

from . import _checks as check
from ._errors import NotBuiltError

_DTYPES = (torch.float16, torch.bfloat16)
FP8 = torch.float8_e4m3fn
# What each function calls paged_attention's arguments, for its errors.
_ARGUMENTS = ("query", "key", "value", "cu_seqlens_q", "seqused_k", "cu_seqlens_k")
_ARGUMENTS += ("block_table", "key_new", "value_new")
NAMES = {
    "paged_attention": dict(zip(_ARGUMENTS, _ARGUMENTS, strict=True)),
    "paged_attention_fp8": dict(zip(_ARGUMENTS, _ARGUMENTS, strict=True)),
    "flash_attn_varlen_func": dict(
        zip(_ARGUMENTS, ("q", "k", "v", *_ARGUMENTS[3:7], "k_new", "v_new"), strict=True)
    ),
    "flash_attn_with_kvcache": dict(
        zip(
            _ARGUMENTS,
            ("q", "k_cache", "v_cache", "cu_seqlens_q", "cache_seqlens", "cu_seqlens_k"),
            strict=False,
        ),
        block_table="block_table",
        key_new="k",
        value_new="v",
    ),
}


class Call:
    """One call's arguments as the kernel takes them (see `prepare`)."""


def fail(op, message, kind=ValueError):
    raise kind(f"{op}: {message}")


def _int32(op, name, tensor, shape, device):
    """`tensor`, checked to be an int32 vector of `shape` on `device`."""
    name = NAMES[op][name]
    check.tensor(op, name, tensor)
    if tensor.dtype != torch.int32 or tensor.device != device:
        fail(
            op,
            f"{name} must be int32 on {device}, not {tensor.dtype} on {tensor.device}",
            TypeError,
        )
    if tuple(tensor.shape) != shape:
        fail(op, f"{name} must have shape {list(shape)}, not {list(tensor.shape)}")
    if shape[0] > 1 and tensor.stride(0) != 1:
        fail(op, f"{name} must be contiguous (stride {tensor.stride(0)})")
    return tensor


def elements(op, query, key, value):
    """What needs no data (the op's fake checks it too): q, k and v of one half dtype
    (or k and v an FP8 cache, float8_e4m3fn) and device, each with a contiguous
    head_dim (as FlashAttention's)."""
    names = NAMES[op]
    cache = FP8 if key.dtype == FP8 else query.dtype
    for arg, tensor in (("query", query), ("key", key), ("value", value)):
        name = names[arg]
        if tensor.dtype not in _DTYPES and (arg == "query" or tensor.dtype != FP8):
            kinds = "float16 or bfloat16" + ("" if arg == "query" else " (or float8_e4m3fn)")
            fail(op, f"{name} must be {kinds}, not {tensor.dtype}", TypeError)
        if arg != "query" and tensor.dtype != cache:
            fail(
                op,
                f"{name} is {tensor.dtype}, {names['key']} {key.dtype} and {names['query']} "
                f"{query.dtype}: the cache must be the queries' dtype or float8_e4m3fn, both "
                "of its tensors alike",
                TypeError,
            )
        if tensor.device != query.device:
            fail(
                op,
                f"{name} is {tensor.dtype} on {tensor.device}, {names['query']} {query.dtype} on "
                f"{query.device}: they must match",
                TypeError,
            )
        if tensor.shape[-1] and tensor.stride(-1) != 1:
            fail(op, f"{name} must have a contiguous last dim (stride {tensor.stride(-1)})")


def features(op, query, key, value, groups):
    """The tensors' dtypes, devices, head dims and heads; the group of kernels."""
    names = NAMES[op]
    for arg, tensor in (("query", query), ("key", key), ("value", value)):
        check.tensor(op, names[arg], tensor)
    elements(op, query, key, value)
    if query.device.type != "cuda":
        fail(op, f"tensors must be on a CUDA device, not {query.device}", TypeError)
    head_dim, q, k, v = query.shape[-1], names["query"], names["key"], names["value"]
    if key.shape[-1] != head_dim or value.shape[-1] != head_dim:
        fail(
            op,
            f"{q}, {k} and {v} must share head_dim, got {head_dim}, {key.shape[-1]}, "
            f"{value.shape[-1]}",
        )
    if key.shape != value.shape:
        fail(op, f"{k} {list(key.shape)} and {v} {list(value.shape)} must have one shape")
    heads_q, heads_kv = query.shape[-2], key.shape[-2]
    if heads_kv == 0 or heads_q % heads_kv:
        fail(op, f"{q}'s heads ({heads_q}) must be a multiple of {k}'s ({heads_kv})")
    if head_dim % 8 or not 0 < head_dim <= 256:
        fail(op, f"head_dim must be a multiple of 8 of at most 256, not {head_dim}")
    built = [size for size in sorted(groups) if size >= head_dim]
    if not built:
        raise NotBuiltError(
            f"ntops_prebuilt.{op}: head_dim {head_dim} is not prebuilt; kernels exist for "
            f"head dims up to {', '.join(map(str, sorted(groups)))} (the `head_dim` switch of "
            "kernels/paged_attention.py)"
        )
    return groups[built[0]]


def _queries(op, call, query, cu_q):
    """Packed queries (3-D, with cu_seqlens_q) or a uniform batch (4-D)."""
    names = NAMES[op]
    if query.ndim == 3:
        if cu_q is None:
            fail(op, f"packed {names['query']} (total_q, heads, head_dim) needs cu_seqlens_q")
        check.tensor(op, "cu_seqlens_q", cu_q)
        if cu_q.ndim != 1 or cu_q.shape[0] == 0:
            fail(op, f"cu_seqlens_q must hold batch + 1 offsets, not shape {list(cu_q.shape)}")
        call.batch, call.q_len = cu_q.shape[0] - 1, 0
        call.cu_q = _int32(op, "cu_seqlens_q", cu_q, (call.batch + 1,), query.device)
    elif query.ndim == 4:
        if cu_q is not None:
            fail(op, f"{names['query']} of (batch, seqlen, heads, head_dim) takes no cu_seqlens_q")
        call.batch, call.q_len, call.cu_q = query.shape[0], query.shape[1], None
    else:
        fail(
            op,
            f"{names['query']} must be (total_q, heads, head_dim) or (batch, seqlen, heads, "
            f"head_dim), not {query.ndim}-D",
        )


def _keys(op, call, key, table):
    """Paged keys (block_table), packed ones (3-D) or a dense cache (4-D): how many each
    request may have."""
    k, batch, device = NAMES[op]["key"], call.batch, key.device
    call.packed, call.table, call.page_size = 0, None, 0
    if table is not None:
        if key.ndim != 4:
            fail(
                op,
                f"a paged {k} must be (num_blocks, page_size, heads_k, head_dim), not {key.ndim}-D",
            )
        check.tensor(op, "block_table", table)
        if table.dtype != torch.int32 or table.device != device or table.ndim != 2:
            fail(
                op,
                f"block_table must be a 2-D int32 tensor on {device}, not {table.ndim}-D "
                f"{table.dtype} on {table.device}",
                TypeError,
            )
        if table.shape[0] != batch or table.shape[1] == 0:
            fail(op, f"block_table {list(table.shape)} must be (batch={batch}, max_blocks >= 1)")
        if table.shape[1] > 1 and table.stride(1) != 1:
            fail(op, f"block_table's rows must be contiguous (stride {table.stride(1)})")
        if key.shape[1] == 0:
            fail(op, f"pages of {k} must hold at least one token (page_size 0)")
        call.table, call.page_size = table, key.shape[1]
        return table.shape[1] * key.shape[1]
    if key.ndim == 3:
        call.packed = 1
        return key.shape[0]
    if key.ndim != 4:
        fail(op, f"{k} must be a 3-D packed or 4-D cache tensor, not {key.ndim}-D")
    if key.shape[0] < batch:
        fail(op, f"{k} holds {key.shape[0]} sequences, fewer than the batch's {batch}")
    return key.shape[1]


def _lengths(op, call, key, seqused_k, cu_k):
    """Each request's keys: seqused_k, else cu_seqlens_k's differences (and packed keys'
    starts), else the whole cache."""
    device, batch = key.device, call.batch
    if call.packed and cu_k is None:
        fail(op, f"packed {NAMES[op]['key']} (total_k, heads_k, head_dim) needs cu_seqlens_k")
    if cu_k is not None and not call.packed and call.table is None:
        fail(op, f"a dense {NAMES[op]['key']} takes {NAMES[op]['seqused_k']}, not cu_seqlens_k")
    call.k_starts = None if cu_k is None else _int32(op, "cu_seqlens_k", cu_k, (batch + 1,), device)
    call.k_len, call.cumulative = -1, 0
    if seqused_k is not None:
        call.k_lens = _int32(op, "seqused_k", seqused_k, (batch,), device)
    elif cu_k is not None:
        call.k_lens, call.cumulative = cu_k, 1
    else:
        call.k_lens, call.k_len = None, call.keys


def _appended(op, call, query, key, key_new, value_new):
    """New entries to write after each request's keys: (batch, seqlen_new, heads_k,
    head_dim), of the queries' dtype (the cache's, or quantized into an FP8 one) and
    the cache's device."""
    names = NAMES[op]
    call.appended, call.new = 0, None
    if (key_new is None) != (value_new is None):
        fail(op, f"give {names['key_new']} and {names['value_new']} (the new entries) together")
    if key_new is None:
        return
    if call.packed:
        fail(op, "new entries are appended to a cache, not to packed keys")
    seqlen = key_new.shape[1] if key_new.ndim == 4 else -1
    shape = (call.batch, seqlen, key.shape[-2], key.shape[-1])
    for arg, tensor in (("key_new", key_new), ("value_new", value_new)):
        name = names[arg]
        check.tensor(op, name, tensor)
        if tuple(tensor.shape) != shape:
            fail(
                op,
                f"{name} must be (batch, seqlen_new, heads_k, head_dim) = {list(shape)}, not "
                f"{list(tensor.shape)}",
            )
        if tensor.dtype != query.dtype or tensor.device != key.device:
            fail(
                op,
                f"{name} is {tensor.dtype} on {tensor.device}; it must be {query.dtype} (the "
                f"queries') on {key.device}: the cache is {key.dtype}",
                TypeError,
            )
        if tensor.shape[-1] and tensor.stride(-1) != 1:
            fail(op, f"{name} must have a contiguous last dim")
    call.appended, call.new = seqlen, (key_new, value_new)


def prepare(op, query, key, cu_q, seqused_k, cu_k, table, key_new, value_new):
    """Check the layout of one call and name its parts for the kernel."""
    call = Call()
    _queries(op, call, query, cu_q)
    call.keys = _keys(op, call, key, table)
    _lengths(op, call, key, seqused_k, cu_k)
    _appended(op, call, query, key, key_new, value_new)
    return call


def scales(op, key, k_descale, v_descale, batch):
    """An FP8 cache's scales (FlashAttention 3's k_descale and v_descale: float32
    dequantization factors of shape (batch, heads_k), or anything that broadcasts to it:
    a scale per tensor, per head), as two (batch, heads_k) views of one layout; None:
    ones. Half-type caches take none."""
    heads_kv = key.shape[-2]
    if key.dtype != FP8:
        for name, given in (("k_descale", k_descale), ("v_descale", v_descale)):
            if given is not None:
                fail(op, f"{name} is for FP8 caches; {NAMES[op]['key']} is {key.dtype}")
        return None
    result = []
    for name, given in (("k_descale", k_descale), ("v_descale", v_descale)):
        if given is None:
            given = torch.ones((), dtype=torch.float32, device=key.device)
        check.tensor(op, name, given)
        if given.dtype != torch.float32 or given.device != key.device:
            fail(
                op,
                f"{name} must be float32 on {key.device}, not {given.dtype} on {given.device}",
                TypeError,
            )
        shape = tuple(given.shape)
        wanted = (batch, heads_kv)[2 - len(shape) :] if len(shape) <= 2 else ()
        if len(shape) > 2 or any(
            size not in (1, whole) for size, whole in zip(shape, wanted, strict=True)
        ):
            fail(
                op,
                f"{name} of shape {list(shape)} must broadcast to (batch, heads_k) = "
                f"{[batch, heads_kv]}",
            )
        result.append(given.expand(batch, heads_kv))
    k_scales, v_scales = result
    if k_scales.stride() != v_scales.stride():
        k_scales, v_scales = k_scales.contiguous(), v_scales.contiguous()
    return k_scales, v_scales


def validate(op, call, query, key):
    """NTOPS_PREBUILT_CHECK_PAGES=1: read the lengths and pages back (a host
    synchronisation) and name the request whose would reach outside the table or the
    cache."""
    total_q = query.shape[0] if query.ndim == 3 else call.batch * call.q_len
    q_starts = call.cu_q.tolist() if call.cu_q is not None else [0, total_q]
    if q_starts[0] < 0 or q_starts[-1] > total_q or q_starts != sorted(q_starts):
        fail(op, f"cu_seqlens_q {q_starts} must rise from 0 to at most total_q ({total_q})")
    starts = call.k_starts.tolist() if call.k_starts is not None else [0] * (call.batch + 1)
    if call.k_len >= 0:
        lengths = [call.k_len] * call.batch
    elif call.cumulative:
        lengths = [end - begin for begin, end in itertools.pairwise(starts)]
    else:
        lengths = call.k_lens.tolist()
    pages = call.table.tolist() if call.table is not None else None
    for b, length in enumerate(lengths):
        if length < 0:
            fail(op, f"request {b}: {length} keys")
        _validate_request(op, call, key, b, starts[b], length + call.appended, pages)


def _validate_request(op, call, key, b, start, total, pages):
    if call.packed:
        if start + total > key.shape[0]:
            fail(op, f"request {b}: keys {start}..{start + total} past the {key.shape[0]} given")
        return
    if pages is None:
        if total > key.shape[1]:
            fail(op, f"request {b}: {total} keys past the cache's {key.shape[1]}")
        return
    used = -(-total // call.page_size)
    if used > len(pages[b]):
        fail(op, f"request {b}: {total} keys need {used} pages; block_table has {len(pages[b])}")
    for index, number in enumerate(pages[b][:used]):
        if not 0 <= number < key.shape[0]:
            fail(
                op,
                f"request {b}: block_table[{b}, {index}] = {number} is outside the cache's "
                f"{key.shape[0]} pages",
                IndexError,
            )


def options(op, window_left, window_right, softcap, num_splits):
    for name, number in (
        ("window_left", window_left),
        ("window_right", window_right),
        ("num_splits", num_splits),
    ):
        if not isinstance(number, int) or isinstance(number, bool) or number < -1:
            fail(op, f"{name} must be an int >= -1, not {number!r}")
    if not isinstance(softcap, (int, float)) or softcap < 0 or not math.isfinite(softcap):
        fail(op, f"softcap must be a finite number >= 0, not {softcap!r}")


def refuse(op, **given):
    """FlashAttention arguments prebuilt attention does not implement, refused by name."""
    if given.pop("dropout_p", 0.0):
        fail(op, "dropout_p must be 0: prebuilt attention is for inference")
    for name, value in given.items():
        if value is not None:
            fail(
                op,
                f"{name} is not supported by prebuilt attention"
                + (
                    " (apply rotary embeddings first: ntops_prebuilt.rotary_position_embedding)"
                    if name.startswith("rotary")
                    else ""
                ),
                NotImplementedError,
            )


def window(op, window_size):
    try:
        left, right = (int(side) for side in window_size)
    except (TypeError, ValueError):
        fail(op, f"window_size must be a pair of ints, not {window_size!r}", TypeError)
    if left < -1 or right < -1:
        fail(op, f"window_size sides must be >= -1 (unbounded), not {window_size!r}")
    return left, right
