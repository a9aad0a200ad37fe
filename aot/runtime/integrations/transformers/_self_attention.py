"""The families' attention modules' forward where their q, k and v projections are fused
(`_fused.Fused`): one product for the three; q and k rotated in place in its result,
one launch for both (two where the family normalises q and k first: Qwen3, Gemma 3);
then transformers' cache update and the attention function, as transformers' forward
calls them, and the module's o_proj. A decode step of Llama-3-8B's shape: 6 launches
for the attention where the unfused path makes 9 (3 products, 2 rotations), and 3 fewer
Python calls.

Calls the fused path does not take run transformers' forward, whose projections and
rotation are served one by one: another attn_implementation than "ntops" or
"ntops_flash" (set after `apply`), arguments by position past the mask, full rotary
tables (a rotary embedding `apply` did not patch), and what the wheel cannot serve (the
parts of transformers' forward then warn, each for itself)."""

import inspect

from ._fused import Fused
from ._layers import rotate

# The cache's argument, by transformers version (5.x: cache; 4.56: past_key_values,
# and the name it deprecates).
_CACHES = ("cache", "past_key_values", "past_key_value")


def convention(original):
    """How `original` (a family's attention forward) updates the cache: "kwargs" (5.x:
    `cache.update(k, v, layer_idx, kwargs=kwargs)`), "cache_kwargs" (4.56: a dict with
    cache_position), or None for a forward this module does not know."""
    names = inspect.signature(original).parameters
    if "cache" in names:
        return "kwargs"
    if "past_key_values" in names and "cache_position" in names:
        return "cache_kwargs"
    return None


def fusable(module):
    """The module's q, k and v projections, where they can be one product."""
    linears = [getattr(module, name, None) for name in ("q_proj", "k_proj", "v_proj")]
    return linears if None not in linears and Fused.fits(linears) else None


def forward(module, original, served, attentions, updates, extras):
    """The forward of attention `module` over its fused projections (`Fused`, made
    here), with `attentions` (attn_implementation -> its AttentionInterface function:
    "ntops"'s, and "ntops_flash"'s for continuous batching), the cache
    convention `updates` and the keyword arguments its family's forward gives the
    attention function (`extras`: a sliding window, Gemma 2's softcapping). Returns
    (forward, fused)."""
    config = module.config
    heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, module.head_dim
    fused = Fused(module, fusable(module))
    normed = getattr(module, "q_norm", None) is not None

    def attend(hidden_states, position_embeddings=None, attention_mask=None, *args, **kwargs):
        cos, sin = position_embeddings
        # (read once: PretrainedConfig's __getattribute__ took 1.7 us here)
        function = attentions.get(config._attn_implementation)
        if (
            args
            or function is None
            or cos.shape[-1] * 2 != dim
            or fused.refusal(served, hidden_states) is not None
            or served.refusal("rotary_position_embedding", hidden_states, cos, sin) is not None
        ):
            return original(hidden_states, position_embeddings, attention_mask, *args, **kwargs)
        fused.current()
        cache = _cache(kwargs)
        batch, seq = hidden_states.shape[:2]
        qkv = fused(hidden_states).view(batch, seq, heads + 2 * kv_heads, dim)
        q, k, v = qkv.split((heads, kv_heads, kv_heads), dim=2)
        if normed:  # new tensors, rotated in place each
            q, k = module.q_norm(q), module.k_norm(k)
            rotate(q, cos, sin)
            rotate(k, cos, sin)
        else:  # q's and k's heads side by side in qkv: one rotation
            rotate(qkv[:, :, : heads + kv_heads], cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if updates == "cache_kwargs":  # 4.56's forward takes cache_position itself
            position = kwargs.pop("cache_position", None)
            arguments = {"sin": sin, "cos": cos, "cache_position": position}
        if cache is not None and updates == "kwargs":
            k, v = cache.update(k, v, module.layer_idx, kwargs=kwargs)
        elif cache is not None:
            k, v = cache.update(k, v, module.layer_idx, arguments)
        dropout = module.attention_dropout if module.training else 0.0
        out, weights = function(
            module, q, k, v, attention_mask, dropout=dropout, scaling=module.scaling,
            **extras, **kwargs,
        )  # fmt: skip
        return module.o_proj(out.reshape(batch, seq, -1)), weights

    return attend, fused


def _cache(kwargs):
    """The cache argument, under whichever of its names it came (popped)."""
    found = None
    for name in _CACHES:
        value = kwargs.pop(name, None)
        if found is None:
            found = value
    return found
