"""The attention function of transformers' continuous batching (`generate_batch`, 5.x)
for attn_implementation "ntops_flash" (AttentionInterface), on the wheel's
flash_attn_varlen_func.

Continuous batching takes only "sdpa", "paged|eager" or a name containing "flash"
(`ContinuousBatchingManager.switch_to_cb_friendly_attn`), hence the name; with a flash
name it builds no masks and passes the batch packed along the tokens, as FlashAttention's
varlen call takes it: query (1, heads, tokens, head_dim), and keys and values (1,
heads_k, keys, head_dim) that the PagedAttentionCache's `update` gathered by read index
(each request's cached keys, then its new ones), with cu_seq_lens_q, cu_seq_lens_k,
max_length_q and max_length_k; the result is (1, tokens, heads, head_dim). Its decode
fast path (block tables over the cache's pages, `flash_attn_with_kvcache`) is taken only
for names matching "flash...2" or "flash...3" and loads flash_attn's own function
(`ensure_decode_fast_path_is_available`), so "ntops_flash" turns it off: every step is a
varlen call."""

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ... import torch as nt
from ._served import fall_back

PAGED = "ntops_flash"  # the attn_implementation
_OP = "paged_attention"  # the kernels flash_attn_varlen_func launches
_VARLEN = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


def attention(served):
    """The function to register, for the wheel's kernels that `served` describes."""

    def ntops_flash_attention(
        module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
        **kwargs,
    ):  # fmt: skip
        why = _refusal(served, query, key, value, attention_mask, dropout, kwargs)
        if why is not None:
            fall_back(f"{type(module).__name__}'s attention", why)
            return _stock(
                module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs
            )
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (tokens, heads, dim)
        out = nt.flash_attn_varlen_func(
            q, k, v, kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"], kwargs["max_length_q"],
            kwargs["max_length_k"], softmax_scale=scaling, causal=_causal(module, is_causal),
            softcap=kwargs.get("softcap") or 0.0,
        )  # fmt: skip
        return out.unsqueeze(0), None

    return ntops_flash_attention


def _refusal(served, query, key, value, mask, dropout, kwargs):
    """Why the wheel cannot run this call, or None."""
    if any(kwargs.get(name) is None for name in _VARLEN) or query.shape[0] != 1:
        return (
            f'a call without continuous batching\'s packed batch ("{PAGED}" serves '
            'generate_batch; "ntops" serves generate)'
        )
    if kwargs.get("block_table") is not None:
        return "a block table (continuous batching's decode fast path, flash_attn's own)"
    why = served.refusal(_OP, query, key, value)
    if why is not None:
        return why
    head_dim = query.shape[-1]
    if key.shape[-1] != head_dim or value.shape[-1] != head_dim:
        return "keys or values of another head dim than the queries'"
    if head_dim not in served.head_dims.get(_OP, ()):
        built = ", ".join(map(str, served.head_dims.get(_OP, ())))
        return f"head_dim {head_dim} (its {_OP} kernels take {built})"
    if dropout:
        return "dropout (the wheel's attention serves inference: call model.eval())"
    if mask is not None:
        return "an attention mask (continuous batching passes none to flash names)"
    if kwargs.get("sliding_window") is not None:
        return "a sliding window (continuous batching reads such layers' keys by its own window)"
    return None


def _causal(module, is_causal):
    return bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)


def _stock(module, query, key, value, mask, dropout, scaling, is_causal, kwargs):
    """transformers' sdpa attention over the packed batch, with the mask continuous
    batching builds for "sdpa" (`_packed_mask`); a call without a packed batch, or with
    a mask, as sdpa reads it."""
    if mask is not None or any(kwargs.get(name) is None for name in _VARLEN):
        return sdpa_attention_forward(
            module, query, key, value, mask, dropout=dropout, scaling=scaling,
            is_causal=is_causal, **kwargs,
        )  # fmt: skip
    mask = _packed_mask(
        kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"], _causal(module, is_causal),
        query.shape[2], key.shape[2],
    )  # fmt: skip
    rest = {name: item for name, item in kwargs.items() if name not in _VARLEN}
    out, _ = sdpa_attention_forward(
        module, query, key, value, mask, dropout=dropout, scaling=scaling, is_causal=False,
        **rest,
    )  # fmt: skip
    return out, None


def _packed_mask(cu_q, cu_k, causal, tokens, keys):
    """(1, 1, tokens, keys) bool, True where query i may see key j: both of one request
    (positions past the last request: of one more), and for `causal`, bottom-right: j
    no nearer its request's last key than i is to its last query."""
    at_q, at_k = (torch.arange(n, device=cu_q.device) for n in (tokens, keys))
    ends_q = torch.cat([cu_q[1:], cu_q.new_tensor([tokens])])
    ends_k = torch.cat([cu_k[1:], cu_k.new_tensor([keys])])
    request_q = torch.bucketize(at_q, cu_q[1:], right=True)
    request_k = torch.bucketize(at_k, cu_k[1:], right=True)
    mask = request_q[:, None] == request_k[None, :]
    if causal:
        mask &= (ends_k[request_k] - at_k)[None, :] >= (ends_q[request_q] - at_q)[:, None]
    return mask[None, None]
