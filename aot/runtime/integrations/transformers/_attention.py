"""The attention function transformers calls for attn_implementation "ntops"
(AttentionInterface): the families' (module, query, key, value, attention_mask,
dropout, scaling, **kwargs) onto the wheel's scaled_dot_product_attention (grouped-query
heads, causal, bool or additive masks, which carry sliding windows) or, for softcapping
(Gemma 2), flash_attn_with_kvcache. Its masks are sdpa's (the name is registered with
sdpa's mask function), so that transformers' sdpa attention is the fallback as it is."""

import sys

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ... import torch as nt
from ._served import fall_back

NAME = "ntops"  # the attn_implementation
_SDPA, _SOFTCAPPED = "scaled_dot_product_attention", "paged_attention"


def attention(served):
    """The function to register, for the wheel's kernels that `served` describes."""

    def ntops_attention(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout=0.0,
        scaling=None,
        is_causal=None,
        **kwargs,
    ):
        why = _refusal(served, query, key, value, attention_mask, dropout, kwargs)
        if why is not None:
            fall_back(f"{type(module).__name__}'s attention", why)
            return _stock(
                module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs
            )
        if is_causal is None:
            is_causal = getattr(module, "is_causal", True)
        # sdpa's reading of a missing mask: causal over several queries, every key for one.
        seq_q = query.shape[2]
        causal = bool(is_causal) and attention_mask is None and seq_q > 1
        if causal and key.shape[2] > seq_q:
            # An empty static cache's prefill: the keys past the queries are its unwritten
            # rows, which upper-left causal masks anyway (transformers' sdpa crops too).
            key, value = key[:, :, :seq_q], value[:, :, :seq_q]
        softcap = kwargs.get("softcap")
        if softcap is not None:  # q and the dense cache as (batch, seq, heads, head_dim) views
            out = nt.flash_attn_with_kvcache(
                query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                softmax_scale=scaling, causal=causal, softcap=softcap,
            )  # fmt: skip
            return out, None
        out = nt.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, is_causal=causal, scale=scaling,
            enable_gqa=True,
        )  # fmt: skip
        return out.transpose(1, 2), None

    return ntops_attention


def _refusal(served, query, key, value, mask, dropout, kwargs):
    """Why the wheel cannot run this call, or None."""
    softcap = kwargs.get("softcap") is not None
    op = _SOFTCAPPED if softcap else _SDPA
    why = served.refusal(op, query, key, value)
    if why is not None:
        return why
    head_dim = query.shape[-1]
    if key.shape[-1] != head_dim or value.shape[-1] != head_dim:
        return "keys or values of another head dim than the queries'"
    if head_dim not in served.head_dims.get(op, ()):
        built = ", ".join(map(str, served.head_dims.get(op, ())))
        return f"head_dim {head_dim} (its {op} kernels take {built})"
    if dropout:
        return "dropout (the wheel's attention serves inference: call model.eval())"
    if kwargs.get("position_bias") is not None:
        return "a position bias"
    if kwargs.get("cache") is not None:
        return "a paged cache (continuous batching: generate_batch within ntt.batching(model))"
    if mask is None:
        return None
    if softcap:
        return (
            "softcapping with an attention mask (padding, or a static cache): the wheel's "
            "softcapped attention takes lengths, not masks"
        )
    # (device indices and flags: `.device` makes a torch.device each time, see _served)
    elsewhere = mask.get_device() != query.get_device() or mask.is_cuda != query.is_cuda
    if mask.ndim != 4 or mask.dtype not in (torch.bool, query.dtype) or elsewhere:
        return "an attention mask that is not 4-D, or not bool or the queries' dtype"
    return None


def _stock(module, query, key, value, mask, dropout, scaling, is_causal, kwargs):
    """transformers' own attention for the call: sdpa's, which takes these masks as they
    are; where sdpa cannot (softcapping), the family's eager attention, with the mask
    made additive and a missing one causal, as its own masks would be."""
    if kwargs.get("softcap") is None:
        return sdpa_attention_forward(
            module, query, key, value, mask, dropout=dropout, scaling=scaling,
            is_causal=is_causal, **kwargs,
        )  # fmt: skip
    eager = sys.modules[type(module).__module__].eager_attention_forward
    mask = _additive(mask, query, key)
    return eager(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)


def _additive(mask, query, key):
    """An sdpa mask (bool, True keeps; None: causal, upper-left, or none for one query) as
    the additive one eager attention adds to its scores."""
    if mask is None:
        seq_q, seq_kv = query.shape[2], key.shape[2]
        if seq_q == 1:
            return None
        mask = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=query.device).tril()[None, None]
    if mask.dtype != torch.bool:
        return mask
    additive = torch.zeros(mask.shape, dtype=query.dtype, device=query.device)
    return additive.masked_fill_(~mask, torch.finfo(query.dtype).min)
