"""flash_attn_with_kvcache and flash_attn_varlen_func over an FP8 KV cache
(paged_attention_fp8): float8_e4m3fn keys and values with FlashAttention 3's k_descale
and v_descale (per tensor, per head, per request and head), against the same math in
float32 over the dequantized cache; new entries quantized exactly as torch quantizes them
(times the scale's reciprocal, saturated); decode, ragged prefill and a mixed batch over
paged and dense caches; a 32k-key needle against float64; CUDA graphs, torch.compile,
and bad input refused before any write."""

import pytest
import torch

from tests.gpu.test_flash_attn import cumulative, pages_of, reference
from tests.tolerances import of

E4M3 = torch.float8_e4m3fn
DTYPES = (torch.float16, torch.bfloat16)


def quantize(x, scale):
    """x (…, heads, dim) as an FP8 cache holds it with `scale` (heads,): the kernel's
    rule (x times the IEEE reciprocal, saturated to +-448, rounded to nearest even)."""
    inverse = torch.reciprocal(scale.float()).view(-1, 1)
    return (x.float() * inverse).clamp(-448, 448).to(E4M3)


def dequantize(x, scale):
    return x.float() * scale.float().view(-1, 1)


def fp8_pages(keys, page_size, seed):
    """FP8 per-request keys scattered into a shuffled paged FP8 cache (tests/gpu/
    test_flash_attn.py's pages_of; the other pages random): (cache, table)."""
    generator = torch.Generator().manual_seed(seed)
    cache, table = pages_of([k.float() for k in keys], page_size, generator=generator)
    return cache.to(E4M3), table


def cached(cache, table, b, count):
    """Request b's first `count` entries of a paged cache, in order."""
    page_size = cache.shape[1]
    positions = torch.arange(count, device=cache.device)
    return cache[table[b, positions // page_size].long(), positions % page_size]


def fp8_requests(lengths, heads, dim, scale):
    """Per-request FP8 keys [(Lk, heads, dim)] whose dequantized values are about normal."""
    return [quantize(torch.randn(n, heads, dim, device="cuda"), scale) for n in lengths]


def check(out, lse, qs, ks, vs, k_scale, v_scale, dtype, lse_of=None, **options):
    """Each request's rows against the float32 reference over its dequantized keys."""
    within = of("paged_attention_fp8", dtype)
    start = 0
    for b, q in enumerate(qs):
        want, want_lse = reference(q, dequantize(ks[b], k_scale), dequantize(vs[b], v_scale),
                                   **options)  # fmt: skip
        got = out[start : start + len(q)] if out.ndim == 3 else out[b]
        torch.testing.assert_close(got.float(), want, **within, msg=f"request {b}")
        if lse_of is not None:
            got_lse = lse_of(lse, b, start, len(q))
            torch.testing.assert_close(got_lse, want_lse, rtol=1e-3, atol=1e-3)
        start += len(q)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
@pytest.mark.parametrize("per", ["tensor", "head"])
def test_decode_appends_into_a_paged_cache(nt, dtype, page_size, per):
    """A GQA decode step of 6 requests of ragged lengths over a paged FP8 cache: the new
    entries land quantized as torch quantizes them, and the output attends to them."""
    heads_q, heads_kv, dim, batch = 32, 8, 128, 6
    lengths = [0, 1, 17, 300, 1500, 4097]
    k_scale = torch.rand(heads_kv if per == "head" else 1, device="cuda") + 0.1
    v_scale = torch.rand(heads_kv if per == "head" else 1, device="cuda") + 0.1
    k_scale, v_scale = (s.expand(heads_kv).contiguous() for s in (k_scale, v_scale))
    ks = fp8_requests([n + 1 for n in lengths], heads_kv, dim, k_scale)
    vs = fp8_requests([n + 1 for n in lengths], heads_kv, dim, v_scale)
    k_cache, table = fp8_pages(ks, page_size, 1)
    v_cache, _ = fp8_pages(vs, page_size, 1)
    q = torch.randn(batch, 1, heads_q, dim, dtype=dtype, device="cuda")
    k_new = torch.randn(batch, 1, heads_kv, dim, dtype=dtype, device="cuda") * 3
    v_new = torch.randn(batch, 1, heads_kv, dim, dtype=dtype, device="cuda") * 3
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    descale = {"k_descale": k_scale.view(1, heads_kv), "v_descale": v_scale.view(1, heads_kv)}
    if per == "tensor":
        descale = {"k_descale": k_scale[:1], "v_descale": v_scale[:1]}
    out, lse = nt.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, block_table=table,
        causal=True, return_softmax_lse=True, **descale,
    )  # fmt: skip
    for b, n in enumerate(lengths):
        ks[b][n] = quantize(k_new[b, 0], k_scale)
        vs[b][n] = quantize(v_new[b, 0], v_scale)
        page, slot = table[b, n // page_size], n % page_size
        # Bit for bit: the kernel's quantization is torch's.
        assert torch.equal(k_cache[page, slot].view(torch.uint8), ks[b][n].view(torch.uint8))
        assert torch.equal(v_cache[page, slot].view(torch.uint8), vs[b][n].view(torch.uint8))
    check(out, lse, [q[b, 0][None] for b in range(batch)], ks, vs, k_scale, v_scale, dtype,
          causal=True)  # fmt: skip
    for b in range(batch):  # the log-sum-exp too
        want = reference(q[b], dequantize(ks[b], k_scale), dequantize(vs[b], v_scale),
                         causal=True)[1]  # fmt: skip
        torch.testing.assert_close(lse[b], want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_ragged_prefill_and_mixed_batch(nt, dtype, head_dim):
    """Ragged causal prefills (one long enough for the 128-row kernel) beside decoding
    requests, over a paged FP8 cache, a scale per request and head."""
    heads_q, heads_kv = 8, 2
    q_lens, k_lens = [1, 37, 600, 1, 5], [300, 37, 900, 1, 77]
    descales = [torch.rand(len(q_lens), heads_kv, device="cuda") + 0.1 for _ in "kv"]
    ks = [quantize(torch.randn(n, heads_kv, head_dim, device="cuda"), descales[0][b])
          for b, n in enumerate(k_lens)]  # fmt: skip
    vs = [quantize(torch.randn(n, heads_kv, head_dim, device="cuda"), descales[1][b])
          for b, n in enumerate(k_lens)]  # fmt: skip
    k_cache, table = fp8_pages(ks, 16, 2)
    v_cache, _ = fp8_pages(vs, 16, 2)
    qs = [torch.randn(n, heads_q, head_dim, dtype=dtype, device="cuda") for n in q_lens]
    out, lse, _ = nt.flash_attn_varlen_func(
        torch.cat(qs), k_cache, v_cache, cumulative(q_lens, "cuda"), None, max(q_lens),
        max(k_lens), causal=True, block_table=table, return_attn_probs=True,
        seqused_k=torch.tensor(k_lens, dtype=torch.int32, device="cuda"),
        k_descale=descales[0], v_descale=descales[1],
    )  # fmt: skip
    within = of("paged_attention_fp8", dtype)
    start = 0
    for b, q in enumerate(qs):
        want, want_lse = reference(
            q, dequantize(ks[b], descales[0][b]), dequantize(vs[b], descales[1][b]), causal=True
        )
        torch.testing.assert_close(out[start : start + len(q)].float(), want, **within)
        torch.testing.assert_close(lse[:, start : start + len(q)], want_lse, rtol=1e-3, atol=1e-3)
        start += len(q)


def test_dense_cache_decode_with_appends(nt):
    """A dense (batch, seqlen_cache, heads_k, head_dim) FP8 cache, two new entries a
    request (speculative decoding), a sliding window and softcap."""
    dtype, batch, heads_q, heads_kv, dim, capacity = torch.bfloat16, 3, 28, 4, 128, 700
    k_scale, v_scale = torch.tensor([0.02], device="cuda"), torch.tensor([0.05], device="cuda")
    k_cache = quantize(torch.randn(batch, capacity, heads_kv, dim, device="cuda"), k_scale)
    v_cache = quantize(torch.randn(batch, capacity, heads_kv, dim, device="cuda"), v_scale)
    lengths = [10, 333, 650]
    q = torch.randn(batch, 2, heads_q, dim, dtype=dtype, device="cuda")
    k_new, v_new = (torch.randn(batch, 2, heads_kv, dim, dtype=dtype, device="cuda") for _ in "kv")
    before = [k_cache.clone(), v_cache.clone()]
    out = nt.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=torch.tensor(lengths, dtype=torch.int32,
        device="cuda"), causal=True, window_size=(200, 0), softcap=30.0, k_descale=k_scale,
        v_descale=v_scale,
    )  # fmt: skip
    within = of("paged_attention_fp8", dtype)
    for b, n in enumerate(lengths):
        before[0][b, n : n + 2] = quantize(k_new[b], k_scale)
        before[1][b, n : n + 2] = quantize(v_new[b], v_scale)
        keys = dequantize(before[0][b, : n + 2], k_scale)
        values = dequantize(before[1][b, : n + 2], v_scale)
        want, _ = reference(q[b], keys, values, causal=True, window=(200, 0), softcap=30.0)
        torch.testing.assert_close(out[b].float(), want, **within)
    assert torch.equal(k_cache.view(torch.uint8), before[0].view(torch.uint8))
    assert torch.equal(v_cache.view(torch.uint8), before[1].view(torch.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_needle_in_32k_keys_against_float64(nt, dtype):
    """Long context: one key among 32768 matches the query strongly (the needle); the
    output, which is mostly its value, and every row's log-sum-exp against float64 over
    the same FP8 cache. FP8 keys and values are widened before the products, which
    accumulate in fp32 (no FP8 accumulation to collapse), so the error is the half type's
    rounding of probabilities and output, not a drift with the length."""
    heads_q, heads_kv, dim, length, page = 32, 8, 128, 32768, 16
    scale = torch.tensor([0.05], device="cuda")
    keys = torch.randn(length, heads_kv, dim, device="cuda")
    values = torch.randn(length, heads_kv, dim, device="cuda")
    q = torch.randn(1, 1, heads_q, dim, device="cuda")
    needle = 20000
    keys[needle] = q[0, 0].view(heads_kv, heads_q // heads_kv, dim).mean(1) * 12
    k8, v8 = quantize(keys, scale.expand(heads_kv)), quantize(values, scale.expand(heads_kv))
    k_cache, table = fp8_pages([k8], page, 3)
    v_cache, _ = fp8_pages([v8], page, 3)
    q = q.to(dtype)
    out, lse = nt.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=length, block_table=table, return_softmax_lse=True,
        k_descale=scale, v_descale=scale,
    )  # fmt: skip
    k64 = (k8.double() * 0.05).repeat_interleave(heads_q // heads_kv, 1)
    v64 = (v8.double() * 0.05).repeat_interleave(heads_q // heads_kv, 1)
    scores = torch.einsum("hd,khd->hk", q[0, 0].double(), k64) / dim**0.5
    want_lse = torch.logsumexp(scores, -1)
    want = torch.einsum("hk,khd->hd", torch.softmax(scores, -1), v64)
    assert torch.softmax(scores, -1)[:, needle].min() > 0.5  # the needle dominates
    unit = {torch.float16: 2**-10, torch.bfloat16: 2**-7}[dtype]
    largest = v64.abs().max()
    assert (out[0, 0].double() - want).abs().max() <= 4 * unit * largest
    assert (lse[0, :, 0].double() - want_lse).abs().max() <= 1e-3


def test_cuda_graph_replay_and_compile(nt):
    """A paged FP8 decode-and-append step captured once, replayed with other lengths;
    torch.compile (fullgraph) orders the cache write; the op passes opcheck's fake-tensor
    and autograd-registration checks."""
    dtype, batch, heads_kv, dim = torch.bfloat16, 4, 8, 128
    scale = torch.full((1, heads_kv), 0.03, device="cuda")
    ks = fp8_requests([1100] * batch, heads_kv, dim, scale[0])
    k_cache, table = fp8_pages(ks, 16, 4)
    v_cache = k_cache.clone()
    q = torch.randn(batch, 1, 32, dim, dtype=dtype, device="cuda")
    k_new = torch.randn(batch, 1, heads_kv, dim, dtype=dtype, device="cuda")
    seqlens = torch.full((batch,), 100, dtype=torch.int32, device="cuda")

    def step():
        return nt.flash_attn_with_kvcache(
            q, k_cache, v_cache, k_new, k_new, cache_seqlens=seqlens, block_table=table,
            causal=True, k_descale=scale, v_descale=scale,
        )  # fmt: skip

    step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for lengths in ([1, 1000, 17, 512], [1024, 3, 900, 64]):
        seqlens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        for b, n in enumerate(lengths):  # the entry just written among earlier ones
            keys = dequantize(cached(k_cache, table, b, n + 1), scale[0])
            want, _ = reference(q[b], keys, keys, causal=True)
            torch.testing.assert_close(out[b].float(), want, **of("paged_attention_fp8", dtype))
    torch.randn(1, device="cuda")  # the generator still works

    def compiled_step(q, k_cache, v_cache, k, seqlens):
        out = nt.flash_attn_with_kvcache(
            q, k_cache, v_cache, k, k, cache_seqlens=seqlens, block_table=table,
            k_descale=scale, v_descale=scale,
        )  # fmt: skip
        return out * 2

    caches = k_cache.clone(), v_cache.clone()
    expected = compiled_step(q, *caches, k_new, seqlens)
    got = torch.compile(compiled_step, fullgraph=True)(q, k_cache, v_cache, k_new, seqlens)
    torch.testing.assert_close(got, expected)
    assert torch.equal(k_cache.view(torch.uint8), caches[0].view(torch.uint8))
    torch.library.opcheck(
        torch.ops.ntops_prebuilt.paged_attention_fp8.default,
        (q, k_cache.clone(), v_cache.clone(), None, seqlens, None, table, k_new, k_new, 1),
        {"k_descale": scale, "v_descale": scale},
        # test_schema compares the FP8 caches with torch.allclose, which FP8 lacks; the
        # declared writes are paged_attention's, whose opcheck runs test_schema.
        test_utils=("test_faketensor", "test_autograd_registration"),
    )


def _args():
    k_cache = torch.zeros(16, 16, 8, 128, dtype=E4M3, device="cuda")
    return {
        "q": torch.randn(2, 1, 32, 128, dtype=torch.bfloat16, device="cuda"),
        "k_cache": k_cache,
        "v_cache": k_cache.clone(),
        "k": torch.randn(2, 1, 8, 128, dtype=torch.bfloat16, device="cuda"),
        "v": torch.randn(2, 1, 8, 128, dtype=torch.bfloat16, device="cuda"),
        "cache_seqlens": torch.tensor([5, 30], dtype=torch.int32, device="cuda"),
        "block_table": torch.arange(8, dtype=torch.int32, device="cuda").view(2, 4),
        "k_descale": torch.ones(1, device="cuda"),
        "v_descale": torch.ones(1, device="cuda"),
    }


BAD = {
    "descale float16": (
        {"k_descale": torch.ones(1, dtype=torch.float16)},
        TypeError,
        "k_descale must be float32",
    ),
    "descale on the CPU": ({"v_descale": torch.ones(1)}, TypeError, "v_descale must be float32 on"),
    "descale shape": (
        {"k_descale": torch.ones(3, 8)},
        ValueError,
        r"k_descale of shape \[3, 8\] must broadcast",
    ),
    "descale heads": ({"v_descale": torch.ones(7)}, ValueError, "must broadcast to"),
    "descale of a half cache": ({"half": True}, ValueError, "k_descale is for FP8 caches"),
    "value not FP8": ({"v_cache": "bf16"}, TypeError, "the cache must be the queries' dtype or"),
    "new entries FP8": ({"k": "fp8"}, TypeError, r"k is torch.float8_e4m3fn .* it must be"),
    "FP8 queries": ({"q_descale": torch.ones(1)}, NotImplementedError, "q_descale is not"),
    "e5m2 cache": ({"e5m2": True}, TypeError, r"k_cache must be float16 or bfloat16 \(or float8_"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_refused_before_writing(nt, case):
    change, kind, message = BAD[case]
    args = _args()
    for name, value in change.items():
        if name == "half":
            args["k_cache"] = torch.zeros(16, 16, 8, 128, dtype=torch.bfloat16, device="cuda")
            args["v_cache"] = args["k_cache"].clone()
        elif name == "e5m2":
            args["k_cache"] = torch.zeros(16, 16, 8, 128, dtype=torch.float8_e5m2, device="cuda")
            args["v_cache"] = args["k_cache"].clone()
        elif value == "bf16":
            args[name] = args[name].to(torch.bfloat16)
        elif value == "fp8":
            args[name] = args[name].to(E4M3)
        elif name == "q_descale":
            args[name] = value.cuda()
        else:
            args[name] = value.cuda() if "CPU" not in case else value
    caches = args["k_cache"].clone(), args["v_cache"].clone()
    with pytest.raises(kind, match=message):
        nt.flash_attn_with_kvcache(**args)
    assert torch.equal(args["k_cache"].float(), caches[0].float())  # nothing written
