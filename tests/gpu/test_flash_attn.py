"""flash_attn_varlen_func and flash_attn_with_kvcache (kernels/paged_attention.py)
against the same math on dense tensors, per request in fp32: ragged batches, packed
and paged keys (page sizes 1 to 256), dense caches, appends, GQA and MQA, head dims
64 to 256, causal, sliding windows, softcap, the log-sum-exp, split decode, CUDA graphs,
torch.compile, and bad input refused before any write."""

import math

import pytest
import torch

from tests.tolerances import of

DTYPES = (torch.float16, torch.bfloat16)


def reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None):
    """One request: q (Lq, Hq, D), k and v (Lk, Hk, D); (out, lse (Hq, Lq))."""
    lq, heads_q, dim = q.shape
    lk, heads_kv = k.shape[0], k.shape[1]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    k = k.float().repeat_interleave(heads_q // heads_kv, 1)
    v = v.float().repeat_interleave(heads_q // heads_kv, 1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    rows = torch.arange(lq, device=q.device)[:, None] + lk - lq
    columns = torch.arange(lk, device=q.device)[None, :]
    seen = torch.ones(lq, lk, dtype=torch.bool, device=q.device)
    left, right = window
    if causal:
        right = 0
    if right >= 0:
        seen &= columns <= rows + right
    if left >= 0:
        seen &= columns >= rows - left
    scores = scores.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    weights = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", weights, v)
    return out, lse.masked_fill(lse == float("-inf"), float("inf"))


def pages_of(keys, page_size, blocks_extra=3, generator=None):
    """Scatter per-request keys [(Lk, Hk, D)] into a shuffled paged cache:
    (cache, table)."""
    heads, dim = keys[0].shape[1:]
    needed = [max(1, -(-len(k) // page_size)) for k in keys]
    total = sum(needed) + blocks_extra
    order = torch.randperm(total, generator=generator).tolist()
    cache = torch.randn(total, page_size, heads, dim, dtype=keys[0].dtype, device=keys[0].device)
    width = max(needed) + 1
    table = torch.zeros(len(keys), width, dtype=torch.int32, device=keys[0].device)
    used = 0
    for b, k in enumerate(keys):
        for p in range(needed[b]):
            number = order[used]
            used += 1
            table[b, p] = number
            chunk = k[p * page_size : (p + 1) * page_size]
            cache[number, : len(chunk)] = chunk
    return cache, table


def dense_of(keys, capacity):
    """Per-request keys [(Lk, Hk, D)] at the start of a dense (batch, capacity, Hk, D)
    cache, the rest random."""
    heads, dim = keys[0].shape[1:]
    cache = torch.randn(len(keys), capacity, heads, dim, dtype=keys[0].dtype, device="cuda")
    for b, k in enumerate(keys):
        cache[b, : len(k)] = k
    return cache


def cumulative(lengths, device):
    return torch.tensor(
        [0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device
    )


def check_requests(out, lse, q_lens, k_lens, qs, ks, vs, dtype, lse_of, **options):
    within = of("paged_attention", dtype)
    start = 0
    for b, (lq, lk) in enumerate(zip(q_lens, k_lens, strict=True)):
        expected, expected_lse = reference(qs[b], ks[b][:lk], vs[b][:lk], **options)
        got = out[start : start + lq] if out.ndim == 3 else out[b]
        torch.testing.assert_close(got.float(), expected, **within, msg=f"request {b}")
        torch.testing.assert_close(lse_of(lse, b, start, lq), expected_lse, rtol=1e-3, atol=1e-3)
        start += lq


def packed_lse(lse, b, start, lq):
    return lse[:, start : start + lq]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_packed(nt, dtype, head_dim, causal):
    q_lens, k_lens = [1, 37, 130, 5, 64], [1, 300, 130, 77, 64]
    heads_q, heads_kv = 8, 2
    qs = [torch.randn(n, heads_q, head_dim, dtype=dtype, device="cuda") for n in q_lens]
    ks = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    vs = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    out, lse, _ = nt.flash_attn_varlen_func(
        torch.cat(qs), torch.cat(ks), torch.cat(vs), cumulative(q_lens, "cuda"),
        cumulative(k_lens, "cuda"), max(q_lens), max(k_lens), causal=causal,
        return_attn_probs=True,
    )  # fmt: skip
    assert out.shape == (sum(q_lens), heads_q, head_dim)
    assert lse.shape == (heads_q, sum(q_lens))
    check_requests(out, lse, q_lens, k_lens, qs, ks, vs, dtype, packed_lse, causal=causal)


@pytest.mark.parametrize("page_size", [1, 16, 17, 64, 256])
@pytest.mark.parametrize("options", [{"causal": True}, {"window": (40, 0)}, {"softcap": 30.0}])
def test_varlen_paged(nt, page_size, options):
    dtype, head_dim = torch.bfloat16, 128
    q_lens, k_lens = [3, 512, 1, 1, 77], [300, 700, 1, 2049, 77]
    qs = [torch.randn(n, 32, head_dim, dtype=dtype, device="cuda") for n in q_lens]
    ks = [torch.randn(n, 8, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    vs = [torch.randn(n, 8, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    generator = torch.Generator().manual_seed(1)
    k_cache, table = pages_of(ks, page_size, generator=generator)
    v_cache, _ = pages_of(vs, page_size, generator=torch.Generator().manual_seed(1))
    window = options.get("window", (-1, -1))
    out = nt.flash_attn_varlen_func(
        torch.cat(qs), k_cache, v_cache, cumulative(q_lens, "cuda"), cumulative(k_lens, "cuda"),
        max(q_lens), max(k_lens), causal=options.get("causal", False), window_size=window,
        softcap=options.get("softcap", 0.0), block_table=table,
    )  # fmt: skip
    within = of("paged_attention", dtype)
    start = 0
    for b, lq in enumerate(q_lens):
        expected, _ = reference(
            qs[b], ks[b], vs[b], causal=options.get("causal", False), window=window,
            softcap=options.get("softcap", 0.0),
        )  # fmt: skip
        torch.testing.assert_close(out[start : start + lq].float(), expected, **within)
        start += lq


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("batch", [1, 5, 8, 64])  # 5: the kernel balances the keys
def test_kvcache_decode_appends(nt, paged, batch):
    """A decode step: each request's new key and value written at its own length (through
    the page table), and attended to with the cache, by one call; every split."""
    dtype, head_dim, heads_q, heads_kv, page = torch.bfloat16, 128, 32, 8, 16
    lengths = torch.randint(1, 3000, (batch,)).tolist()
    lengths[0] = 4095 if batch > 1 else 2000
    capacity = 4096
    q = torch.randn(batch, 1, heads_q, head_dim, dtype=dtype, device="cuda")
    k_new = torch.randn(batch, 1, heads_kv, head_dim, dtype=dtype, device="cuda")
    v_new = torch.randn(batch, 1, heads_kv, head_dim, dtype=dtype, device="cuda")
    ks = [torch.randn(capacity, heads_kv, head_dim, dtype=dtype, device="cuda") for _ in lengths]
    vs = [torch.randn(capacity, heads_kv, head_dim, dtype=dtype, device="cuda") for _ in lengths]
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    if paged:
        k_cache, table = pages_of(ks, page, generator=torch.Generator().manual_seed(2))
        v_cache, _ = pages_of(vs, page, generator=torch.Generator().manual_seed(2))
    else:
        k_cache, v_cache, table = torch.stack(ks), torch.stack(vs), None
    results = []
    for splits in (0, 1, 3):
        kc, vc = k_cache.clone(), v_cache.clone()
        out, lse = nt.flash_attn_with_kvcache(
            q, kc, vc, k_new, v_new, cache_seqlens=seqlens, block_table=table, causal=True,
            num_splits=splits, return_softmax_lse=True,
        )  # fmt: skip
        results.append(out)
    within = of("paged_attention", dtype)
    for b, n in enumerate(lengths):
        keys = torch.cat([ks[b][:n], k_new[b]])
        values = torch.cat([vs[b][:n], v_new[b]])
        expected, expected_lse = reference(q[b], keys, values, causal=True)
        torch.testing.assert_close(out[b].float(), expected, **within)
        torch.testing.assert_close(lse[b], expected_lse, rtol=1e-3, atol=1e-3)
        if paged:
            slot = table[b, n // page].item(), n % page
            written = kc[slot[0], slot[1]]
        else:
            written = kc[b, n]
        torch.testing.assert_close(written, k_new[b, 0], rtol=0, atol=0)
    for other in results[1:]:
        torch.testing.assert_close(other, results[0], **within)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("page_size", [None, 16, 32, 48, 64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_long_prefills(nt, dtype, head_dim, page_size, causal):
    """Requests of 129 to 1000 queries (512 each on average or more: on sm_90 the Gluon
    kernel's bucket), some over longer caches (chunks of a prefill), keys packed or in
    pages of 16 to 256; outputs and log-sum-exps."""
    q_lens, k_lens = [300, 1000, 129, 700], [300, 1500, 129, 2100]
    heads_q, heads_kv = 16, 4
    qs = [torch.randn(n, heads_q, head_dim, dtype=dtype, device="cuda") for n in q_lens]
    ks = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    vs = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    if page_size is None:
        keys, values, table = torch.cat(ks), torch.cat(vs), None
    else:
        keys, table = pages_of(ks, page_size, generator=torch.Generator().manual_seed(2))
        values, _ = pages_of(vs, page_size, generator=torch.Generator().manual_seed(2))
    out, lse, _ = nt.flash_attn_varlen_func(
        torch.cat(qs), keys, values, cumulative(q_lens, "cuda"), cumulative(k_lens, "cuda"),
        max(q_lens), max(k_lens), causal=causal, block_table=table, return_attn_probs=True,
    )  # fmt: skip
    check_requests(out, lse, q_lens, k_lens, qs, ks, vs, dtype, packed_lse, causal=causal)


@pytest.mark.parametrize("page", [None, 16, 64])
def test_kvcache_long_prefill_without_appends(nt, page):
    """A uniform batch of 512 queries each over a paged or dense cache
    (flash_attn_with_kvcache with no new entries): the Gluon kernel's bucket on sm_90
    (16 keys a copy, or 64), its (batch, heads, seqlen) log-sum-exp."""
    dtype, head_dim, heads_q, heads_kv, seqlen = torch.bfloat16, 128, 32, 8, 512
    lengths = [512, 1000, 600]
    q = torch.randn(len(lengths), seqlen, heads_q, head_dim, dtype=dtype, device="cuda")
    ks = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in lengths]
    vs = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in lengths]
    if page is None:
        k_cache, v_cache, table = dense_of(ks, 1100), dense_of(vs, 1100), None
    else:
        k_cache, table = pages_of(ks, page, generator=torch.Generator().manual_seed(5))
        v_cache, _ = pages_of(vs, page, generator=torch.Generator().manual_seed(5))
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = nt.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table, causal=True,
        return_softmax_lse=True,
    )  # fmt: skip
    assert lse.shape == (len(lengths), heads_q, seqlen)
    within = of("paged_attention", dtype)
    for b in range(len(lengths)):
        expected, expected_lse = reference(q[b], ks[b], vs[b], causal=True)
        torch.testing.assert_close(out[b].float(), expected, **within, msg=f"request {b}")
        torch.testing.assert_close(lse[b], expected_lse, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("page", [None, 16, 64])
@pytest.mark.parametrize("window", [(-1, -1), (100, 0)])
def test_kvcache_prefill_chunk(nt, page, window):
    """A chunk of prefill (40 new tokens per request) appended at each request's own
    length and attended to causally, over a dense cache (batch entries apart) and over
    pages of 16 (key rows gathered) and of 64 (blocks of keys through TMA on sm_90),
    a sliding window's blocks at any offset."""
    dtype, head_dim, heads_q, heads_kv, chunk = torch.bfloat16, 128, 32, 8, 40
    lengths, capacity = [100, 333, 0, 701], 768
    batch = len(lengths)
    q = torch.randn(batch, chunk, heads_q, head_dim, dtype=dtype, device="cuda")
    k_new, v_new = (
        torch.randn(batch, chunk, heads_kv, head_dim, dtype=dtype, device="cuda") for _ in range(2)
    )
    ks = [torch.randn(capacity, heads_kv, head_dim, dtype=dtype, device="cuda") for _ in lengths]
    vs = [torch.randn(capacity, heads_kv, head_dim, dtype=dtype, device="cuda") for _ in lengths]
    if page:
        k_cache, table = pages_of(ks, page, generator=torch.Generator().manual_seed(4))
        v_cache, _ = pages_of(vs, page, generator=torch.Generator().manual_seed(4))
    else:
        k_cache, v_cache, table = torch.stack(ks), torch.stack(vs), None
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out = nt.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, block_table=table,
        causal=True, window_size=window,
    )  # fmt: skip
    within = of("paged_attention", dtype)
    for b, n in enumerate(lengths):
        keys = torch.cat([ks[b][:n], k_new[b]])
        values = torch.cat([vs[b][:n], v_new[b]])
        expected, _ = reference(q[b], keys, values, causal=True, window=window)
        torch.testing.assert_close(out[b].float(), expected, **within, msg=f"request {b}")


def test_kvcache_past_2_31_elements(nt):
    """A server's cache of 2^31 elements or more (here its pages past 2^31 elements from
    its start) takes the 64-bit kernel, which is built unsplit: a decode's split must
    still give every request all its keys (it once summed one part of them) and the
    appended entries land in their pages."""
    dtype, heads_q, heads_kv, head_dim, page = torch.bfloat16, 32, 8, 128, 16
    blocks = 2**31 // (page * heads_kv * head_dim) + 64
    lengths = [3000, 17, 700, 1]
    ks = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in lengths]
    vs = [torch.randn(n, heads_kv, head_dim, dtype=dtype, device="cuda") for n in lengths]
    k_cache = torch.zeros(blocks, page, heads_kv, head_dim, dtype=dtype, device="cuda")
    v_cache = torch.zeros_like(k_cache)
    table = torch.zeros(len(lengths), 200, dtype=torch.int32, device="cuda")
    number = blocks - 1  # the last pages: offsets past 2^31
    for b, n in enumerate(lengths):
        for p in range(n // page + 1):
            table[b, p] = number
            keys, values = ks[b][p * page : (p + 1) * page], vs[b][p * page : (p + 1) * page]
            k_cache[number, : len(keys)], v_cache[number, : len(values)] = keys, values
            number -= 1
    q = torch.randn(len(lengths), 1, heads_q, head_dim, dtype=dtype, device="cuda")
    k_new, v_new = (
        torch.randn(len(lengths), 1, heads_kv, head_dim, dtype=dtype, device="cuda")
        for _ in range(2)
    )
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out = nt.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, block_table=table, causal=True
    )
    within = of("paged_attention", dtype)
    for b, n in enumerate(lengths):
        keys, values = torch.cat([ks[b], k_new[b]]), torch.cat([vs[b], v_new[b]])
        expected, _ = reference(q[b], keys, values, causal=True)
        torch.testing.assert_close(out[b].float(), expected, **within, msg=f"request {b}")
        slot = table[b, n // page].item(), n % page
        torch.testing.assert_close(k_cache[slot], k_new[b, 0], rtol=0, atol=0)
        torch.testing.assert_close(v_cache[slot], v_new[b, 0], rtol=0, atol=0)


def test_kvcache_int_lengths_and_spec_decoding(nt):
    """cache_seqlens as an int, 4 new queries per request (a speculative step), MQA."""
    dtype, batch, heads_q, head_dim = torch.float16, 3, 16, 64
    k_cache = torch.randn(batch, 600, 1, head_dim, dtype=dtype, device="cuda")
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(batch, 4, heads_q, head_dim, dtype=dtype, device="cuda")
    k, v = (torch.randn(batch, 4, 1, head_dim, dtype=dtype, device="cuda") for _ in range(2))
    before = k_cache.clone()
    out = nt.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=500, causal=True)
    within = of("paged_attention", dtype)
    for b in range(batch):
        expected, _ = reference(
            q[b], torch.cat([before[b, :500], k[b]]), torch.cat([v_cache[b, :500], v[b]]),
            causal=True,
        )  # fmt: skip
        torch.testing.assert_close(out[b].float(), expected, **within)
    torch.testing.assert_close(k_cache[:, 500:504], k)
    torch.testing.assert_close(k_cache[:, :500], before[:, :500])
    torch.testing.assert_close(k_cache[:, 504:], before[:, 504:])


def test_mixed_batch_one_launch(nt):
    """One 512-token prefill chunk beside 63 decoding requests, over one paged cache."""
    dtype, head_dim = torch.bfloat16, 128
    q_lens = [512] + [1] * 63
    k_lens = [1024, *torch.randint(1, 4000, (63,)).tolist()]
    qs = [torch.randn(n, 32, head_dim, dtype=dtype, device="cuda") for n in q_lens]
    ks = [torch.randn(n, 8, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    vs = [torch.randn(n, 8, head_dim, dtype=dtype, device="cuda") for n in k_lens]
    k_cache, table = pages_of(ks, 64, generator=torch.Generator().manual_seed(3))
    v_cache, _ = pages_of(vs, 64, generator=torch.Generator().manual_seed(3))
    seqused = torch.tensor(k_lens, dtype=torch.int32, device="cuda")
    out, lse, _ = nt.flash_attn_varlen_func(
        torch.cat(qs), k_cache, v_cache, cumulative(q_lens, "cuda"), None, 512, max(k_lens),
        causal=True, block_table=table, return_attn_probs=True, seqused_k=seqused,
    )  # fmt: skip
    check_requests(out, lse, q_lens, k_lens, qs, ks, vs, dtype, packed_lse, causal=True)


def test_cuda_graph_replay(nt):
    """A paged decode step captured once, replayed with other lengths and pages."""
    dtype, batch, head_dim = torch.bfloat16, 4, 128
    ks = [torch.randn(1024, 8, head_dim, dtype=dtype, device="cuda") for _ in range(batch)]
    vs = [torch.randn(1024, 8, head_dim, dtype=dtype, device="cuda") for _ in range(batch)]
    k_cache, table = pages_of(ks, 16, generator=torch.Generator().manual_seed(4))
    v_cache, _ = pages_of(vs, 16, generator=torch.Generator().manual_seed(4))
    q = torch.randn(batch, 1, 32, head_dim, dtype=dtype, device="cuda")
    seqlens = torch.full((batch,), 100, dtype=torch.int32, device="cuda")
    nt.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = nt.flash_attn_with_kvcache(
            q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table, causal=True
        )
    within = of("paged_attention", dtype)
    for lengths in ([1, 1000, 17, 512], [1024, 3, 900, 64]):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        q.copy_(torch.randn_like(q))
        graph.replay()
        for b, n in enumerate(lengths):
            expected, _ = reference(q[b], ks[b][:n], vs[b][:n], causal=True)
            torch.testing.assert_close(out[b].float(), expected, **within)
    torch.randn(1, device="cuda")  # the generator still works


def test_compile_and_opcheck(nt):
    """torch.compile (fullgraph) orders the cache write; the op passes opcheck."""
    dtype, head_dim = torch.float16, 64
    k_cache = torch.randn(2, 64, 4, head_dim, dtype=dtype, device="cuda")
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(2, 1, 8, head_dim, dtype=dtype, device="cuda")
    k, v = (torch.randn(2, 1, 4, head_dim, dtype=dtype, device="cuda") for _ in range(2))
    seqlens = torch.tensor([10, 40], dtype=torch.int32, device="cuda")

    def step(q, k_cache, v_cache, k, v, seqlens):
        out = nt.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens)
        return out * 2

    eager_cache = k_cache.clone(), v_cache.clone()
    expected = step(q, *eager_cache, k, v, seqlens)
    compiled = torch.compile(step, fullgraph=True)
    got = compiled(q, k_cache, v_cache, k, v, seqlens)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(k_cache, eager_cache[0])
    torch.library.opcheck(
        torch.ops.ntops_prebuilt.paged_attention.default,
        (q, k_cache.clone(), v_cache.clone(), None, seqlens, None, None, k, v, 1),
    )


def _decode_args(dtype=torch.bfloat16):
    k_cache = torch.randn(32, 16, 8, 128, dtype=dtype, device="cuda")
    table = torch.arange(8, dtype=torch.int32, device="cuda").view(2, 4)
    return {
        "q": torch.randn(2, 1, 32, 128, dtype=dtype, device="cuda"),
        "k_cache": k_cache,
        "v_cache": torch.randn_like(k_cache),
        "k": torch.randn(2, 1, 8, 128, dtype=dtype, device="cuda"),
        "v": torch.randn(2, 1, 8, 128, dtype=dtype, device="cuda"),
        "cache_seqlens": torch.tensor([5, 30], dtype=torch.int32, device="cuda"),
        "block_table": table,
    }


BAD = {
    "block_table int64": ({"block_table": "int64"}, TypeError, "block_table must be a 2-D int32"),
    "table rows": ({"block_table": "rows"}, ValueError, r"block_table \[3, 4\] must be"),
    "seqlens int64": (
        {"cache_seqlens": "int64"},
        TypeError,
        "cache_seqlens must be int32",
    ),
    "seqlens shape": (
        {"cache_seqlens": "shape"},
        ValueError,
        r"cache_seqlens must have shape \[2\]",
    ),
    "q dtype": ({"q": "fp32"}, TypeError, "q must be float16 or bfloat16"),
    "k new heads": (
        {"k": "heads"},
        ValueError,
        r"flash_attn_with_kvcache: k must be \(batch, seqlen_new, heads_k",
    ),
    "head dim": ({"q": "dim"}, ValueError, "must share head_dim"),
    "cpu table": ({"block_table": "cpu"}, TypeError, "block_table must be"),
    "rotary": ({"rotary_cos": "given"}, NotImplementedError, "rotary_cos is not supported"),
}


def _spoil(args, name, how):
    value = args.get(name)
    if how == "int64":
        return value.long()
    if how == "rows":
        return torch.zeros(3, 4, dtype=torch.int32, device="cuda")
    if how == "shape":
        return value[:1]
    if how == "fp32":
        return value.float()
    if how == "heads":
        return torch.randn(2, 1, 4, 128, dtype=value.dtype, device="cuda")
    if how == "dim":
        return torch.randn(2, 1, 32, 64, dtype=value.dtype, device="cuda")
    if how == "cpu":
        return value.cpu()
    return torch.ones(1)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_refused_before_writing(nt, case):
    spoiled, error, message = BAD[case]
    args = _decode_args()
    for name, how in spoiled.items():
        args[name] = _spoil(args, name, how)
    before = args["k_cache"].clone()
    with pytest.raises(error, match=message):
        nt.flash_attn_with_kvcache(**args)
    assert torch.equal(args["k_cache"], before)


def test_pages_out_of_range(nt, monkeypatch):
    """Page numbers past the cache and lengths past the table: the kernel stays inside
    the cache (clamped indices), and the checking mode names the request."""
    args = _decode_args()
    args["block_table"][1, 1] = 10_000
    args["cache_seqlens"][0] = 1_000
    nt.flash_attn_with_kvcache(**args)
    torch.cuda.synchronize()
    monkeypatch.setenv("NTOPS_PREBUILT_CHECK_PAGES", "1")
    with pytest.raises(ValueError, match="request 0: 1001 keys need 63 pages; block_table has 4"):
        nt.flash_attn_with_kvcache(**args)
    args["cache_seqlens"][0] = 5
    with pytest.raises(IndexError, match=r"request 1: block_table\[1, 1\] = 10000 is outside"):
        nt.flash_attn_with_kvcache(**args)


def test_empty_and_refusals(nt):
    q = torch.empty(0, 8, 64, dtype=torch.float16, device="cuda")
    k = torch.empty(0, 8, 64, dtype=torch.float16, device="cuda")
    cu = torch.zeros(1, dtype=torch.int32, device="cuda")
    assert nt.flash_attn_varlen_func(q, k, k, cu, cu, 0, 0).shape == (0, 8, 64)
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        nt.flash_attn_varlen_func(q, k, k, cu, cu, 0, 0, dropout_p=0.1)
    bad = torch.empty(1, 8, 260, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="head_dim must be a multiple of 8"):
        nt.flash_attn_varlen_func(bad, bad, bad, cu, cu, 1, 1)
