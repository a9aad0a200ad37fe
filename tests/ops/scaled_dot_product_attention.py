"""scaled_dot_product_attention: queries of a kernel's bucket against key lengths no
block divides, every mask, the last keys and values arriving as new KV-cache entries
that the kernel writes into the caches; calls with a KV cache and with a lower-right
causal mask, which torch's function cannot take (`reference` can)."""

import enum

import torch

from tests.calls import Call
from tests.gpu.layouts import size_in, strided, values

F = torch.nn.functional


class CausalVariant(enum.IntEnum):
    """torch.nn.attention.bias.CausalVariant's numbers (importing it imports dynamo:
    1.4 s more for each fuzz worker)."""

    UPPER_LEFT = 1
    LOWER_RIGHT = 2


def reference(
    query, key, value, attn_mask=None, dropout_p=0, is_causal=False, scale=None,
    enable_gqa=False, causal_variant=None, present_key=None, present_value=None,
    present_key_slot=None, present_value_slot=None,
):  # fmt: skip
    """torch's attention after writing the new KV-cache entries into their slots;
    LOWER_RIGHT as the mask torch.nn.attention.bias.causal_lower_right stands for."""
    for present, slot in ((present_key, present_key_slot), (present_value, present_value_slot)):
        if present is not None:
            slot.copy_(present)
    if is_causal and causal_variant == CausalVariant.LOWER_RIGHT:
        seq_q, seq_kv = query.shape[-2], key.shape[-2]
        ones = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=query.device)
        attn_mask, is_causal = ones.tril(seq_kv - seq_q), False
    # torch's math backend: its fused backends are not references (cuDNN returned NaN
    # for keys expanded along the sequence, H100, torch 2.11).
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )


def num_tensors(variant):
    # output, query, key, value, new keys, new values (, mask)
    return 7 if variant["switches"]["mask"] in ("bool", "float") else 6


def run(nt, variant, spec, dtype, bucket):
    """Queries of the kernel's bucket (decode: 3 of them, against keys split into
    parts) in the spec's layout; key lengths no block divides. The last keys and values
    arrive as new KV-cache entries, which the kernel writes into the caches."""
    switches = variant["switches"]
    head_dim, mask = int(switches["head_dim"]), switches["mask"]
    batch, heads_q, heads_kv = 2, 4, 2
    seq_q = size_in(bucket[0], 3 if bucket[0][1] <= 16 else 37)
    seq_kv = size_in(bucket[1], 1000 if bucket[0][1] <= 16 else 53)
    wide = spec.width == 64
    unit = None if spec.unit[0] is None else 3

    def layout(heads, seq, wide=False):
        return strided(
            (batch, heads, seq, head_dim), dtype, unit=unit, aligned=spec.aligned, wide=wide
        )

    # wide: the query's two batches lie 2^31 elements apart
    q, k, v = layout(heads_q, seq_q, wide), layout(heads_kv, seq_kv), layout(heads_kv, seq_kv)
    appended = 3  # a few new entries: the kernel writes them (more are copied first)
    new_k, new_v = layout(heads_kv, appended), layout(heads_kv, appended)
    attn_mask = None
    if mask == "bool":
        attn_mask = torch.rand(q.shape[0], 1, seq_q, seq_kv, device="cuda") > 0.3
        attn_mask[..., 0] = True
    elif mask == "float":
        attn_mask = values((1, heads_q, 1, seq_kv), dtype)
    causal = mask == "causal"
    result = nt.scaled_dot_product_attention(
        q, k, v, attn_mask, is_causal=causal, enable_gqa=True,
        present_key=new_k, present_value=new_v,
        present_key_slot=k[:, :, -appended:], present_value_slot=v[:, :, -appended:],
    )  # fmt: skip
    assert torch.equal(k[:, :, -appended:], new_k)
    assert torch.equal(v[:, :, -appended:], new_v)
    kr, vr = (t.float().repeat_interleave(heads_q // heads_kv, 1) for t in (k, v))
    float_mask = (
        attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.float()
    )
    expected = F.scaled_dot_product_attention(q.float(), kr, vr, float_mask, is_causal=causal)
    return result, expected.to(dtype)


def calls(name, dtype):
    """A decode step writing one new entry into each of two caches (views of them, not
    what a sample's shapes make), and grouped queries under a lower-right causal mask."""

    def cached(make):
        query = make((1, 32, 1, 128), dtype)
        caches = [make((1, 8, 64, 128), dtype) for _ in "kv"]
        # the caches' last positions, as views (a slice, without slicing a fake tensor)
        slots = [cache.as_strided((1, 8, 1, 128), cache.stride(), 63 * 128) for cache in caches]
        new = [make((1, 8, 1, 128), dtype) for _ in "kv"]
        return (query,), {
            "key": caches[0], "value": caches[1], "enable_gqa": True,
            "present_key": new[0], "present_value": new[1],
            "present_key_slot": slots[0], "present_value_slot": slots[1],
        }  # fmt: skip

    def lower_right(make):
        query, key, value = (
            make((1, 32, 5, 128), dtype),
            *(make((1, 8, 40, 128), dtype) for _ in "kv"),
        )
        return (query,), {
            "key": key, "value": value, "is_causal": True, "enable_gqa": True,
            "causal_variant": CausalVariant.LOWER_RIGHT,
        }  # fmt: skip

    return [
        Call(f"{name} with a KV cache", name, cached, reference),
        Call(f"{name} causal lower right", name, lower_right, reference),
    ]
