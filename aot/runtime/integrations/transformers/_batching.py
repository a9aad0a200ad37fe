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

from ... import torch as nt
from . import _attention
from ._served import fall_back

PAGED = "ntops_flash"  # the attn_implementation
_OP = "paged_attention"  # the kernels flash_attn_varlen_func launches
_VARLEN = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


def packed_batches():
    """Whether this transformers' continuous batching calls the attention function
    with its packed batch, the cache updated before the call (as above; 5.24.0). Older
    5.x releases (5.17.0) register "paged|sdpa" and "paged|flash_attention_2" functions
    that take the cache and update it themselves, a convention not served here."""
    from transformers import AttentionInterface

    return "paged|sdpa" not in AttentionInterface()


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
            window_size=_window(kwargs.get("sliding_window")), softcap=kwargs.get("softcap") or 0.0,
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
    return None


def _window(sliding_window):
    """FlashAttention's window_size for transformers' sliding_window (its flash path's
    (w - 1, w - 1); the right side is causal's 0 here)."""
    return (-1, -1) if sliding_window is None else (sliding_window - 1, 0)


def _causal(module, is_causal):
    return bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)


def _stock(module, query, key, value, mask, dropout, scaling, is_causal, kwargs):
    """transformers' attention as `_attention` falls back to it (sdpa's; the family's
    eager one for softcapping) over the packed batch, with the mask continuous batching
    builds for those (`_packed_mask`); a call without a packed batch, or with a mask, as
    it comes."""
    if mask is None and all(kwargs.get(name) is not None for name in _VARLEN):
        mask = _packed_mask(
            kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"], _causal(module, is_causal),
            kwargs.get("sliding_window"), query.shape[2], key.shape[2],
        )  # fmt: skip
        kwargs = {name: item for name, item in kwargs.items() if name not in _VARLEN}
        is_causal = False
    out, _ = _attention._stock(module, query, key, value, mask, dropout, scaling, is_causal, kwargs)
    return out, None


def _packed_mask(cu_q, cu_k, causal, sliding_window, tokens, keys):
    """(1, 1, tokens, keys) bool, True where query i may see key j: both of one request
    (positions past the last request: of one more), and j within i's reach: bottom-right
    aligned, its distance back from i's aligned key at least 0 (causal) and less than
    the window."""
    at_q, at_k = (torch.arange(n, device=cu_q.device) for n in (tokens, keys))
    # new_full, not new_tensor: no copy from the host (transformers captures its steps in
    # CUDA graphs, where such a copy raises)
    ends_q = torch.cat([cu_q[1:], cu_q.new_full((1,), tokens)])
    ends_k = torch.cat([cu_k[1:], cu_k.new_full((1,), keys)])
    request_q = torch.bucketize(at_q, cu_q[1:], right=True)
    request_k = torch.bucketize(at_k, cu_k[1:], right=True)
    mask = request_q[:, None] == request_k[None, :]
    distance = (ends_k[request_k] - at_k)[None, :] - (ends_q[request_q] - at_q)[:, None]
    if causal:
        mask &= distance >= 0
    if sliding_window is not None:
        mask &= distance < sliding_window
    return mask[None, None]
