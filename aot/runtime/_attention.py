"""Attention: scaled_dot_product_attention (with grouped-query heads, KV cache, causal
and tensor masks) and rotary_position_embedding."""

import enum
import math

import torch

from . import _C, _ops
from . import _checks as check
from ._errors import NotBuiltError
from ._library import fake, increment_versions, routed

_launch = _C.launch
attention_rules = _C.attention_rules
_SWITCHES = _ops.SWITCHES["scaled_dot_product_attention"]
_HEAD_DIMS = tuple(int(head_dim) for head_dim in _SWITCHES["head_dim"])
# kernels/scaled_dot_product_attention.py's MASKS: causal, a bool or a float tensor (no
# mask: causal with the diagonal past the last key).
_CAUSAL, _BOOL, _FLOAT = _SWITCHES["mask"]
_SDPA = {
    (int(head_dim), mask): group
    for (head_dim, mask), group in check.groups(
        "scaled_dot_product_attention", "head_dim", "mask"
    ).items()
}
# New KV-cache entries the attention kernel writes and reads itself (a decode or
# speculative step's); more (a chunked prefill's) are copied first: the kernel folds
# them 16 at a time, unpipelined.
_FUSED_ENTRIES = 16


class CausalVariant(enum.IntEnum):
    """Where the causal diagonal starts when seq_q != seq_kv, numbered as in
    torch.nn.attention.bias.CausalVariant (whose members are accepted too)."""

    UPPER_LEFT = 1  # query i sees keys 0..i
    LOWER_RIGHT = 2  # query i sees keys 0..i + seq_kv - seq_q


def _sdpa_checks(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
    op = "scaled_dot_product_attention"
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        check.tensor(op, name, tensor)
        if tensor.ndim != 4:
            raise ValueError(
                f"{op}: {name} must be (batch, heads, seq, head_dim), got {tensor.ndim}-D"
            )
    if dropout_p != 0:
        raise ValueError(
            f"{op}: dropout_p must be 0; prebuilt attention does not drop (got {dropout_p})"
        )
    if attn_mask is not None and is_causal:
        raise ValueError(f"{op}: attn_mask and is_causal cannot be used together")
    floating(query)
    batch, heads_q, _, head_dim = query.shape
    if key.shape != value.shape or key.shape[0] != batch or key.shape[3] != head_dim:
        raise ValueError(
            f"{op}: key {list(key.shape)} and value {list(value.shape)} must match each other, "
            f"and query {list(query.shape)} in batch and head_dim"
        )
    for name, tensor in (("key", key), ("value", value)):
        if tensor.dtype != query.dtype or tensor.device != query.device:
            raise TypeError(
                f"{op}: {name} is {tensor.dtype} on {tensor.device}, query {query.dtype} on "
                f"{query.device}: they must match"
            )
    heads_kv = key.shape[1]
    if heads_kv == 0:
        raise ValueError(f"{op}: key and value have no heads (shape {list(key.shape)})")
    if not enable_gqa and heads_q != heads_kv:
        raise ValueError(
            f"{op}: query has {heads_q} heads and key {heads_kv}; pass enable_gqa=True"
        )
    if heads_q % heads_kv:
        raise ValueError(
            f"{op}: query heads ({heads_q}) must be a multiple of key heads ({heads_kv})"
        )
    if head_dim not in _HEAD_DIMS:
        raise NotBuiltError(
            f"ntops_prebuilt.{op}: head_dim {head_dim} is not prebuilt; kernels exist for "
            f"head_dim {', '.join(map(str, _HEAD_DIMS))} (the `head_dim` switch of "
            "kernels/scaled_dot_product_attention.py)"
        )


def floating(query):
    """Attention over a float dtype, as torch's (whose int calls fail converting the
    scale): checked in the op's fake too, which sees no kernel table."""
    if not query.dtype.is_floating_point:
        raise TypeError(
            f"scaled_dot_product_attention: query must be a float tensor, not {query.dtype}"
        )


@fake("scaled_dot_product_attention")
def _fake(query, key, value, *rest):
    """The result's metadata, where the torch function takes other arguments."""
    floating(query)
    return query.new_empty(query.shape)


def paired(present, slot, name):
    """Whether a KV-cache write of `name` (key, value) is asked for: its new entries and
    their slot come together or not at all (as the op's route checks `Api.written`)."""
    if (present is None) != (slot is None):
        raise ValueError(
            f"scaled_dot_product_attention: give present_{name} and present_{name}_slot together"
        )
    return present is not None


def _check_cache(present, slot, name):
    if not paired(present, slot, name):
        return
    for what, tensor in ((f"present_{name}", present), (f"present_{name}_slot", slot)):
        check.tensor("scaled_dot_product_attention", what, tensor)
    if slot.shape != present.shape:
        raise ValueError(
            f"scaled_dot_product_attention: present_{name} {list(present.shape)} does not fit "
            f"present_{name}_slot {list(slot.shape)}"
        )


def _strides_agree(tensor, other):
    """Equal strides wherever `tensor` has more than one index: the stride of a size-1
    dim is never used, and views give it any value."""
    return all(
        size == 1 or x == y
        for size, x, y in zip(tensor.shape, tensor.stride(), other.stride(), strict=True)
    )


def _is_tail(cache, present, slot):
    """Whether `slot` is the last few positions of the attended `cache` (as a model's
    decode step passes it), so that the kernel can write `present` there itself."""
    appended = slot.shape[2]
    return (
        0 < appended <= min(cache.shape[2], _FUSED_ENTRIES)
        and slot.shape[:2] == cache.shape[:2]
        and slot.shape[3] == cache.shape[3]
        and _strides_agree(slot, cache)
        and present.dtype == cache.dtype
        and present.device == cache.device
        and slot.data_ptr()
        == cache.data_ptr() + (cache.shape[2] - appended) * cache.stride(2) * cache.element_size()
    )


def _present(queries, key, value, present_key, present_value, key_slot, value_slot, fused=-1):
    """The new KV-cache entries for the launch: (present_key, present_value, how many)
    where the call has a decode step's `queries`, the slots are the last positions of
    `key` and `value` and the entries share strides (the kernel writes them, reading
    them from where they are); else they are copied into their slots here and the launch
    gets none (prefill kernels write no cache: the Gluon one does not). `fused`: the
    count the launcher's rules found (`attention_rules`), -1 where they were not asked."""
    if present_key is None and present_value is None:
        return key, value, 0
    if (
        fused < 0
        and queries <= _FUSED_ENTRIES
        and present_key is not None
        and present_value is not None
        and present_key.shape == present_value.shape
        and _strides_agree(present_key, present_value)
        and _is_tail(key, present_key, key_slot)
        and _is_tail(value, present_value, value_slot)
    ):
        fused = key_slot.shape[2]
    if fused > 0:
        return present_key, present_value, fused
    for present, slot in ((present_key, key_slot), (present_value, value_slot)):
        if present is not None:
            slot.copy_(present)
    return key, value, 0


@routed("scaled_dot_product_attention")
def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    causal_variant=None,
    present_key=None,
    present_value=None,
    present_key_slot=None,
    present_value_slot=None,
):
    """softmax(query key^T * scale + mask) value over (batch, heads, seq, head_dim).

    With a KV cache, `key` and `value` are the caches: the new entries
    (`present_key`, `present_value`) are first written into the cache views
    `present_key_slot` and `present_value_slot`, then attended over with the rest.
    Where the slots are the caches' last few positions (a decode step's), the attention
    kernel writes them itself: no copy kernels. Masks are bool (True keeps) or float
    (added), broadcast to (batch, heads_q, seq_q, seq_kv)."""
    ruled = attention_rules(
        query, key, value, present_key, present_value, present_key_slot, present_value_slot,
        enable_gqa, _HEAD_DIMS, _FUSED_ENTRIES,
    )  # fmt: skip
    if ruled is None or dropout_p != 0 or (attn_mask is not None and is_causal):
        _sdpa_checks(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        _check_cache(present_key, present_key_slot, "key")
        _check_cache(present_value, present_value_slot, "value")
    if ruled is None:  # the launcher does not read these tensors itself: Python does
        fused, out = -1, None
        batch, heads_q, seq_q, head_dim = query.shape
        heads_kv, seq_kv = key.shape[1], key.shape[2]
    else:
        fused, out, batch, heads_q, seq_q, head_dim, heads_kv, seq_kv = ruled
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    if is_causal or attn_mask is None:
        mask = None
    else:
        check.tensor("scaled_dot_product_attention", "attn_mask", attn_mask)
        if attn_mask.dtype not in (torch.bool, query.dtype) or attn_mask.device != query.device:
            raise TypeError(
                f"scaled_dot_product_attention: attn_mask must be bool or {query.dtype} on "
                f"{query.device}, not {attn_mask.dtype} on {attn_mask.device}"
            )
        try:
            mask = attn_mask.expand(batch, heads_q, seq_q, seq_kv)
        except RuntimeError as error:
            raise ValueError(
                f"scaled_dot_product_attention: attn_mask {list(attn_mask.shape)} does not "
                f"broadcast to {[batch, heads_q, seq_q, seq_kv]}"
            ) from error
    # Every check passed: only now may the caches change.
    present = _present(
        seq_q, key, value, present_key, present_value, present_key_slot, present_value_slot, fused
    )
    if present[2]:  # the kernel writes the caches: their autograd versions move
        increment_versions((key, value))
    if out is None:
        out = query.new_empty(query.shape)
    # The kernels see the result as (batch, heads_kv, group * seq_q, head_dim): the rows
    # of the query heads that share a key/value head, one after another (a view the
    # launcher makes of the new, contiguous result).
    group = heads_q // heads_kv
    rows = (out, (batch, heads_kv, group * seq_q, head_dim), ((0, 1), (1, group), (2, 1), (3, 1)))
    if is_causal:
        lower_right = int(causal_variant or CausalVariant.UPPER_LEFT) == CausalVariant.LOWER_RIGHT
        offset = seq_kv - seq_q if lower_right else 0
        _launch(_SDPA[head_dim, _CAUSAL], rows, query, key, value, *present, scale, offset)
    elif mask is None:  # every key below the diagonal: the unmasked loop
        _launch(_SDPA[head_dim, _CAUSAL], rows, query, key, value, *present, scale, seq_kv)
    else:
        kind = _BOOL if attn_mask.dtype == torch.bool else _FLOAT
        _launch(_SDPA[head_dim, kind], rows, query, key, value, *present, mask, scale)
    return out
