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


def _dense_keys(key, cu_k, table, batch):
    """Every request's key rows as (batch, slots, heads_k, head_dim): its pages in
    table order, its packed rows from cu_seqlens_k on, or its dense cache's row."""
    if table is not None:
        gathered = key[table.long()]  # (batch, max_blocks, page, heads, dim)
        return gathered.flatten(1, 2)
    if key.ndim == 3:
        rows = _first(cu_k, batch)[:, None].long() + torch.arange(key.shape[0], device=key.device)
        return key[rows.clamp(max=key.shape[0] - 1)]
    return _first(key, batch)


def reference(
    query, key, value, cu_seqlens_q=None, seqused_k=None, cu_seqlens_k=None,
    block_table=None, key_new=None, value_new=None, max_seqlen_q=-1, softmax_scale=None,
    causal=False, window_left=-1, window_right=-1, softcap=0.0, num_splits=0,
):  # fmt: skip
    """paged_attention in fp32 over every slot a request may have, masked: (out, lse),
    the op's declared reference (the tests compare with it; vectorised, so that it also
    runs on fake tensors). New entries are written into the caches first, at each
    request's length. Refuses what FlashAttention refuses: dtypes other than float16 and
    bfloat16, a head_dim of stride other than 1."""
    for tensor in (query, key, value):
        if tensor.dtype not in (torch.float16, torch.bfloat16) or tensor.dtype != query.dtype:
            raise TypeError("paged_attention: q, k and v must be float16 or bfloat16, alike")
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
    if appended:
        _dense_write(key, value, key_new, value_new, lengths, block_table)
    keys, values_ = (_dense_keys(t, cu_seqlens_k, block_table, batch) for t in (key, value))
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


def _dense_write(key, value, key_new, value_new, lengths, table):
    batch, appended = key_new.shape[:2]
    slots = lengths[:, None] + torch.arange(appended, device=key.device)
    rows = torch.arange(batch, device=key.device)[:, None].expand(-1, appended)
    if table is not None:
        page = key.shape[1]
        rows = table.long().gather(1, slots // page)
        slots = slots % page
    key[rows, slots] = key_new
    value[rows, slots] = value_new
