"""paged_attention's reference: the same math on dense tensors, in fp32, vectorised so
that it also runs on fake tensors (no value decides a shape). The op's declared reference
(kernels/paged_attention.py's API) and the tests'; it imports nothing of the wheel, so the
CPU suites run it from the source tree too."""

import math

import torch


def _first(tensor, count, skip=0):
    """tensor[skip:skip + count] by index (slicing a fake CUDA tensor fails on a CPU-only
    torch)."""
    return tensor.index_select(0, torch.arange(skip, skip + count, device=tensor.device))


def _counts(cumulative, batch):
    return (_first(cumulative, batch, 1) - _first(cumulative, batch)).long()


def _dense_keys(key, cu_k, table, batch, scale=None):
    """Every request's key rows as (batch, slots, heads_k, head_dim): its pages in
    table order, its packed rows from cu_seqlens_k on, or its dense cache's row; FP8
    ones times their `scale` (batch, heads_k), in fp32."""
    if table is not None:
        rows = key[table.long()].flatten(1, 2)  # (batch, max_blocks * page, heads, dim)
    elif key.ndim == 3:
        at = _first(cu_k, batch)[:, None].long() + torch.arange(key.shape[0], device=key.device)
        rows = key[at.clamp(max=key.shape[0] - 1)]
    else:
        rows = _first(key, batch)
    return rows if scale is None else rows.float() * scale[:, None, :, None]


def _scales(descale, batch, heads_kv, device):
    """An FP8 cache's scales as (batch, heads_k) float32 (None: ones)."""
    if descale is None:
        return torch.ones((batch, heads_kv), dtype=torch.float32, device=device)
    return descale.float().expand(batch, heads_kv)


def _quantized(new, scale):
    """New entries (batch, seqlen_new, heads_k, head_dim) as an FP8 cache holds them:
    times their scale's reciprocal, saturated to +-448 (inf becomes NaN, as torch's cast
    to float8_e4m3fn makes it). _fp8_reference's `_saturated`, spelled again: the CPU
    suites load this file alone (tests/ops/paged_attention.py), where no sibling imports."""
    inverse = torch.reciprocal(scale)[:, None, :, None]
    y = (new.float() * inverse).clamp(-448.0, 448.0)
    y = torch.where(new.float().isinf(), float("nan"), y)
    return y.to(torch.float8_e4m3fn)


def reference(
    query, key, value, cu_seqlens_q=None, seqused_k=None, cu_seqlens_k=None,
    block_table=None, key_new=None, value_new=None, max_seqlen_q=-1, softmax_scale=None,
    causal=False, window_left=-1, window_right=-1, softcap=0.0, num_splits=0,
    k_descale=None, v_descale=None,
):  # fmt: skip
    """paged_attention (and paged_attention_fp8) in fp32 over every slot a request may
    have, masked: (out, lse), the ops' declared reference (the tests compare with it;
    vectorised, so that it also runs on fake tensors). New entries are written into the
    caches first, at each request's length. FP8 caches (float8_e4m3fn) hold the values
    times the reciprocals of k_descale and v_descale (float32, broadcast to (batch,
    heads_k); None: 1), new entries quantized so. Refuses what FlashAttention refuses:
    dtypes other than float16 and bfloat16 (and FP8 caches), a head_dim of stride other
    than 1."""
    fp8 = key.dtype == torch.float8_e4m3fn
    for tensor in (query, key, value):
        alike = tensor.dtype == (key.dtype if fp8 and tensor is not query else query.dtype)
        if query.dtype not in (torch.float16, torch.bfloat16) or not alike:
            raise TypeError(
                "paged_attention: q, k and v must be float16 or bfloat16, alike, or k and v "
                "float8_e4m3fn"
            )
        if tensor.shape[-1] and tensor.stride(-1) != 1:
            raise ValueError("paged_attention: q, k and v must have a contiguous last dim")
    uniform = query.ndim == 4
    batch = query.shape[0] if uniform else cu_seqlens_q.shape[0] - 1
    heads_q, head_dim = query.shape[-2], query.shape[-1]
    heads_kv = key.shape[-2]
    device = query.device
    if seqused_k is not None:
        lengths = seqused_k.long()
    elif cu_seqlens_k is not None:
        lengths = _counts(cu_seqlens_k, batch)
    elif block_table is not None:
        lengths = torch.full((batch,), block_table.shape[1] * key.shape[1], device=device)
    else:
        lengths = torch.full((batch,), key.shape[1], device=device)
    appended = 0 if key_new is None else key_new.shape[1]
    scales = (None, None)
    if fp8:
        scales = tuple(_scales(s, batch, heads_kv, device) for s in (k_descale, v_descale))
    if appended:
        _dense_write(key, value, key_new, value_new, lengths, block_table, scales)
    keys, values_ = (
        _dense_keys(t, cu_seqlens_k, block_table, batch, s)
        for t, s in ((key, scales[0]), (value, scales[1]))
    )
    positions = torch.arange(keys.shape[1], device=device).expand(batch, -1)
    seen = positions < lengths[:, None] + appended
    if uniform:
        q = query.flatten(0, 1)
        owner = torch.arange(q.shape[0], device=device) // query.shape[1]
        index = torch.arange(q.shape[0], device=device) % query.shape[1]
        q_lengths = torch.full((batch,), query.shape[1], device=device)
    else:
        q = query
        tokens = torch.arange(q.shape[0], device=device)
        owner = torch.searchsorted(_first(cu_seqlens_q, batch, 1).long(), tokens, right=True)
        owner = owner.clamp(max=batch - 1)
        index = tokens - cu_seqlens_q.long()[owner]
        q_lengths = _counts(cu_seqlens_q, batch)
    group = heads_q // heads_kv
    k = keys[owner].float().repeat_interleave(group, 2)  # (tokens, slots, heads_q, dim)
    v = values_[owner].float().repeat_interleave(group, 2)
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    scores = torch.einsum("thd,tshd->ths", q.float(), k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    diagonal = (lengths + appended - q_lengths)[owner] + index  # each token's position
    mask = seen[owner]
    right = 0 if causal else window_right
    if right >= 0:
        mask = mask & (positions[owner] <= diagonal[:, None] + right)
    if window_left >= 0:
        mask = mask & (positions[owner] >= diagonal[:, None] - window_left)
    scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, -1)
    weights = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("ths,tshd->thd", weights, v).to(query.dtype).view(query.shape)
    lse = lse.masked_fill(lse == float("-inf"), float("inf"))
    if uniform:
        return out, lse.view(batch, query.shape[1], heads_q).transpose(1, 2).contiguous()
    return out, lse.t().contiguous()


def _dense_write(key, value, key_new, value_new, lengths, table, scales):
    if scales[0] is not None:
        key_new, value_new = _quantized(key_new, scales[0]), _quantized(value_new, scales[1])
    batch, appended = key_new.shape[:2]
    slots = lengths[:, None] + torch.arange(appended, device=key.device)
    rows = torch.arange(batch, device=key.device)[:, None].expand(-1, appended)
    if table is not None:
        page = key.shape[1]
        rows = table.long().gather(1, slots // page)
        slots = slots % page
    key[rows, slots] = key_new
    value[rows, slots] = value_new
