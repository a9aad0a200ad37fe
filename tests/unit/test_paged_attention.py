"""paged_attention without a GPU: the runtime's constants agree with the kernel file's, the
split of a decode's keys follows from shapes as documented, the op's schema declares its
cache writes and two results, and the dense reference (the GPU tests' yardstick) agrees
with attention written request by request."""

import math

import pytest
import torch

from ntops_aot.kernels import paged_attention as declared
from tests.ops.paged_attention import reference


def test_the_runtime_and_the_kernel_file_agree(installed):
    runtime = installed._flash_attn
    assert runtime.DECODE_QUERIES == declared.DECODE_QUERIES
    assert runtime.BY_DESCRIPTOR == declared.BY_DESCRIPTOR
    assert runtime.LONG_ROWS == declared.LONG_ROWS
    assert runtime.WARP_SPECIALIZED == declared.WARP_SPECIALIZED
    assert runtime.WARP_SPECIALIZED_WIDE == declared.WARP_SPECIALIZED_WIDE
    assert runtime.LONG_QUERIES == declared.LONG_QUERIES
    buckets = [bucket.upto for bucket in declared.TUNING.buckets]
    expected = [
        declared.DECODE_QUERIES, 9, declared.BY_DESCRIPTOR, declared.LONG_ROWS,
        declared.WARP_SPECIALIZED, None,
    ]  # fmt: skip
    assert buckets == expected
    assert runtime._UNIT_ROWS == declared.UNIT_ROWS
    variant = type("V", (), {"switches": (("head_dim", "128"),), "arch": "sm_90"})()
    assert declared.config(variant, "decode").premake["parts"] == runtime._MOST_PARTS
    assert declared.config(variant, "decode").premake["block_size_m"] == declared.UNIT_ROWS


@pytest.mark.parametrize(
    ("heads_kv", "units", "capacity", "splits", "expected"),
    [
        (8, 1, 8192, 0, (16, 128)),  # batch 1: the most parts, of 128 keys or more
        (8, 320, 8192, 0, (3, 256 * 19)),  # batch 256: the workspace caps it; long parts
        (8, 1, 32768, 0, (32, 128)),  # batch 1 over 32k keys: past one round, 1k-key parts
        (8, 10, 32768, 0, (26, 256)),  # batch 8 whose table holds 32k keys: as the grid allows
        (8, 80, 32768, 0, (12, 1024)),  # batch 64 of those: the workspace caps it
        (8, 10, 32768, 1, (1, 1 << 30)),  # num_splits=1: no split
        (8, 10, 32768, 5, (5, 256)),  # num_splits=n: n parts
        (8, 10, 32768, 40, (32, 256)),  # no more than the kernel's
        (8, 2000, 128, 0, (2, 256 * 121)),  # more tiles than anything: still 2 parts
    ],
)
def test_decode_splits_follow_from_shapes(installed, monkeypatch, heads_kv, units, capacity,
                                         splits, expected):  # fmt: skip
    runtime = installed._flash_attn
    monkeypatch.setattr(runtime, "_multiprocessors", lambda index: 132)
    device = torch.device("cuda", 0)
    assert runtime._parts(heads_kv, units, capacity, device, splits) == expected


@pytest.mark.parametrize(
    ("heads_kv", "units", "batch", "splits", "expected"),
    [
        (8, 5, 4, 0, (7, -(33 << 16 | 128))),  # batch 4: one wave of 33 a head, 128 keys least
        (8, 8, 7, 0, (5, -(33 << 16 | 128))),  # batch 7
        (8, 10, 8, 0, (4, -(33 << 16 | 128))),  # batch 8: 80 tiles (one spare block each)
        (8, 20, 16, 0, None),  # batch 16: more tiles than multiprocessors
        (8, 3, 3, 0, (11, -(33 << 16 | 128))),  # batch 3
        (8, 2, 2, 0, None),  # batch 2: more than 6 multiprocessors a tile (128-key parts)
        (8, 5, 4, 5, None),  # num_splits given
        (1, 80, 65, 0, None),  # past the kernel's 64 lanes
        (2, 20, 5, 0, (7, -(132 << 16 | 128))),  # 2 key/value heads, 4 queries of 16 heads
    ],
)
def test_decode_balances_from_shapes(installed, monkeypatch, heads_kv, units, batch, splits,
                                     expected):  # fmt: skip
    """Balanced decode (kernels/_lib/paged.py's balanced_item) where the multiprocessors
    number more than 1 and at most 6 times the tiles: a grid of whole waves of 2 programs a
    multiprocessor, at least twice the blocks of rows, with the target coded into
    min_chunk."""
    runtime = installed._flash_attn
    monkeypatch.setattr(runtime, "_multiprocessors", lambda index: 132)
    device = torch.device("cuda", 0)
    assert runtime._balanced(heads_kv, units, batch, device, splits) == expected


def test_long_prefills_the_gluon_kernel_does_take_its_buckets(installed):
    """Requests of 512 queries each on average whose call has no window, softcap or
    appended entries: the Gluon kernel's buckets, copies of 16 keys over pages of 16 and
    32, of 64 over pages of 64 to 256 (powers of two, one after another), packed keys or
    a dense cache; otherwise the Triton ones'."""
    prefill, runtime = installed._flash_attn._prefill, installed._flash_attn
    pages = torch.empty(10, 16, 8, 128)
    assert prefill(16, pages, pages, 4096, 8, True) == runtime.WARP_SPECIALIZED
    assert prefill(16, pages, pages, 4096, 8, False) == runtime.LONG_ROWS  # a window, say
    assert prefill(16, pages, pages, 4000, 8, True) == runtime.LONG_ROWS  # 500 each
    assert prefill(16, pages, pages, 1000, 8, True) == runtime.DECODE_QUERIES + 1  # short
    packed = torch.empty(1024, 8, 128)
    assert prefill(0, packed, packed, 1024, 2, True) == runtime.WARP_SPECIALIZED_WIDE
    assert prefill(0, packed, packed, 1024, 2, False) == runtime.BY_DESCRIPTOR
    dense = torch.empty(2, 1024, 8, 128)
    assert prefill(0, dense, dense, 1024, 2, True) == runtime.WARP_SPECIALIZED_WIDE
    copies = ((8, 0), (16, 16), (24, 0), (32, 16), (48, 0), (64, 64), (128, 64), (256, 64))
    for page, expected in copies:
        cache = torch.empty(10, page, 8, 128)
        assert runtime._copies(page, cache, cache) == expected, page
    assert prefill(48, *[torch.empty(10, 48, 8, 128)] * 2, 4096, 8, True) == runtime.LONG_ROWS
    strided = torch.empty(10, 2, 64, 8, 128)[:, 0]  # pages not one after another
    assert runtime._copies(64, strided, strided) == 0
    dense_strided = torch.empty(2, 2, 1024, 8, 128)[:, 0]
    assert runtime._copies(0, dense_strided, dense_strided) == 0


def test_prefill_by_descriptor_takes_unpaged_keys_and_pages_of_64_in_a_row(installed):
    """The TMA kernel's bucket: keys not paged, or in pages of a multiple of 64 keys
    that follow each other in the cache; pages of 16 and 32, or strided ones, not."""
    by_descriptor = installed._flash_attn._by_descriptor
    packed = torch.empty(300, 8, 128)
    assert by_descriptor(0, packed, packed)
    for page, expected in ((16, False), (32, False), (64, True), (128, True), (192, True)):
        cache = torch.empty(10, page, 8, 128)
        assert by_descriptor(page, cache, cache) == expected, page
    strided = torch.empty(10, 2, 64, 8, 128)[:, 0]  # pages not one after another
    assert not by_descriptor(64, strided, strided)
    assert not by_descriptor(64, torch.empty(10, 64, 8, 128), strided)


def test_prefill_kernels_follow_from_shapes(installed):
    """Pages of 64: the descriptors' kernel; pages of 16: 128-row blocks where requests
    average 128 queries or more (8 prefills), 64-row blocks else (a chunk beside 63
    decodes); the Gluon kernel's buckets for long requests it does."""
    prefill = installed._flash_attn._prefill
    pages_64, pages_16 = torch.empty(10, 64, 8, 128), torch.empty(10, 16, 8, 128)
    # Calls the Gluon kernel does not do (a window, softcap or appended entries):
    assert prefill(64, pages_64, pages_64, 11786, 8, False) == 10
    assert prefill(16, pages_16, pages_16, 11786, 8, False) == 11
    assert prefill(16, pages_16, pages_16, 512 + 63, 64, False) == 9
    assert prefill(16, pages_16, pages_16, 1024, 8, False) == 11
    # and those it does: long requests go to it, a mixed batch stays
    assert prefill(64, pages_64, pages_64, 11786, 8, True) == 13
    assert prefill(16, pages_16, pages_16, 11786, 8, True) == 12
    assert prefill(16, pages_16, pages_16, 512 + 63, 64, True) == 9


def test_the_schema_declares_the_cache_writes_and_both_results(installed):
    schema = str(torch.ops.ntops_prebuilt.paged_attention.default._schema)
    assert "Tensor(a!) key, Tensor(b!) value" in schema
    assert schema.endswith("-> (Tensor, Tensor)")


def _per_request(q, k, v, causal, left, softcap):
    """One request's attention, the plain way: (Lq, Hq, D) over (Lk, Hk, D)."""
    lq, heads, dim = q.shape
    lk = k.shape[0]
    k = k.float().repeat_interleave(heads // k.shape[1], 1)
    v = v.float().repeat_interleave(heads // v.shape[1], 1)
    out = torch.zeros(lq, heads, dim)
    for i in range(lq):
        position = i + lk - lq
        for h in range(heads):
            scores = (k[:, h] @ q[i, h].float()) / math.sqrt(dim)
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)
            keys = torch.arange(lk)
            seen = torch.ones(lk, dtype=torch.bool)
            if causal:
                seen &= keys <= position
            if left >= 0:
                seen &= keys >= position - left
            if seen.any():
                weights = torch.softmax(scores.masked_fill(~seen, float("-inf")), 0)
                out[i, h] = weights @ v[:, h]
    return out


@pytest.mark.parametrize("layout", ["paged", "packed", "dense"])
def test_the_dense_reference_agrees_request_by_request(layout):
    torch.manual_seed(0)
    dtype, heads_kv, group, dim, page = torch.bfloat16, 2, 3, 16, 5
    q_lens, k_lens = [1, 4, 3], [6, 9, 3]
    query = torch.randn(sum(q_lens), heads_kv * group, dim, dtype=dtype)
    cu_q = torch.tensor([0, 1, 5, 8], dtype=torch.int32)
    ks = [torch.randn(n, heads_kv, dim, dtype=dtype) for n in k_lens]
    vs = [torch.randn(n, heads_kv, dim, dtype=dtype) for n in k_lens]
    options = {"causal": True, "window_left": 4, "softcap": 7.0, "max_seqlen_q": 4}
    if layout == "packed":
        cu_k = torch.tensor([0, 6, 15, 18], dtype=torch.int32)
        args = (torch.cat(ks), torch.cat(vs), cu_q)
        out, lse = reference(query, *args, cu_seqlens_k=cu_k, **options)
    else:
        lengths = torch.tensor(k_lens, dtype=torch.int32)
        if layout == "paged":
            table = torch.tensor([[5, 0], [2, 4], [1, 3]], dtype=torch.int32)
            caches = [torch.zeros(6, page, heads_kv, dim, dtype=dtype) for _ in "kv"]
            for b, n in enumerate(k_lens):
                for j in range(n):
                    caches[0][table[b, j // page], j % page] = ks[b][j]
                    caches[1][table[b, j // page], j % page] = vs[b][j]
            out, lse = reference(query, *caches, cu_q, lengths, block_table=table, **options)
        else:
            caches = [torch.zeros(3, 10, heads_kv, dim, dtype=dtype) for _ in "kv"]
            for b, n in enumerate(k_lens):
                caches[0][b, :n], caches[1][b, :n] = ks[b], vs[b]
            out, lse = reference(query, *caches, cu_q, lengths, **options)
    start = 0
    for b, lq in enumerate(q_lens):
        expected = _per_request(query[start : start + lq], ks[b], vs[b], True, 4, 7.0)
        got = out[start : start + lq].float()
        torch.testing.assert_close(got, expected, rtol=1.6e-2, atol=1e-2)
        start += lq
    assert lse.shape == (heads_kv * group, sum(q_lens))
