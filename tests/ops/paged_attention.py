"""paged_attention (flash_attn_varlen_func, flash_attn_with_kvcache): the same math on
dense tensors (`reference`, vectorised so that it runs on fake tensors too), a call per
kernel of a variant in its specialisation's layout (`run`), the calls the fake-tensor
check and opcheck make (`calls`), and the fuzz's random calls (`fuzz_spec`)."""

import functools
import importlib.util
import math
import pathlib

import torch

from tests.calls import Call
from tests.gpu.layouts import size_in, strided, values

# plan, output, query, key, value, key_new, value_new, cu_seqlens_q, k_starts, k_lens,
# block_table, lse
TENSORS = 12


def reference(*args, **kwargs):
    """The op's declared reference (ntops_prebuilt._paged_reference): the installed wheel's
    where there is one (the GPU suites), else the source tree's (the CPU suites)."""
    try:
        from ntops_prebuilt._paged_reference import reference as dense
    except ImportError:  # the file itself: importing the runtime package loads its _C
        dense = _source_reference()
    return dense(*args, **kwargs)


@functools.cache
def _source_reference():
    path = pathlib.Path(__file__).parents[2] / "aot" / "runtime" / "_paged_reference.py"
    spec = importlib.util.spec_from_file_location("_paged_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference


def num_tensors(variant):
    return TENSORS


def fp8_cache(shape, scale, device="cuda"):
    """A random FP8 (e4m3fn) cache whose values times `scale` ((heads_k,) float32) are
    about normal."""
    return (values(shape, torch.float32, device=device) / scale.view(shape[-2], 1)).to(
        torch.float8_e4m3fn
    )


def run(nt, variant, spec, dtype, bucket, fp8=False):
    """A paged call of the bucket's queries per request (decode: 3; prefill: 37 beside a
    decoding request) over a shuffled paged cache; pages of 16 keys, of 64 for the bucket
    of keys through tensor descriptors, 300 queries beside the one and a window for the
    bucket of long requests, 1100 for the Gluon kernel's, over pages of 16 and of 64 (their
    calls' queries dims are 10 to 13: aot/runtime/_flash_attn.py's _prefill). The 64-bit
    kernels': the aligned
    ones' over a cache past 2^31 elements (a server's), its pages at the end; the
    generic one's two queries 2^31 elements apart. `fp8`: paged_attention_fp8's, over
    an FP8 cache with a scale per head (its buckets are decode, 9 and 11 on)."""
    head_dim = int(variant["switches"]["head_dim"])
    heads_q, heads_kv, page = 8, 2, 64 if bucket[0][0] in (10, 13) else 16
    queries = {11: 300, 12: 1100, 13: 1100}  # long requests; the Gluon kernel's 512 on average
    q_len = queries.get(bucket[0][0]) or size_in(bucket[0], 3 if bucket[0][1] <= 8 else 37)
    # A window the Gluon kernel does not do keeps the 128-row Triton kernel's bucket.
    options = {"window_left": 1000} if bucket[0][0] == 11 else {}
    q_lens = [1, 1] if spec.width == 64 and not spec.aligned else [q_len, 1]
    total = sum(q_lens)
    query = strided(
        (total, heads_q, head_dim), dtype, unit=2, aligned=spec.aligned,
        wide=spec.width == 64 and not spec.aligned,
    )  # fmt: skip
    blocks = 12
    if spec.width == 64 and spec.aligned:
        blocks += 2**31 // (page * heads_kv * head_dim)
    scales = [torch.rand(heads_kv, device="cuda") + 0.25 for _ in "kv"] if fp8 else [None] * 2
    kind = torch.float8_e4m3fn if fp8 else dtype
    cache = []
    for scale in scales:
        cache.append(torch.empty((blocks, page, heads_kv, head_dim), dtype=kind, device="cuda"))
        shape = (12, page, heads_kv, head_dim)
        cache[-1][-12:] = fp8_cache(shape, scale) if fp8 else values(shape, dtype)
    if fp8:
        options.update(k_descale=scales[0], v_descale=scales[1])
    table = (torch.randperm(12, dtype=torch.int32, device="cuda") + blocks - 12).view(2, 6)
    lengths = torch.tensor([70, 33], dtype=torch.int32, device="cuda")
    cu_q = torch.tensor([0, q_lens[0], total], dtype=torch.int32, device="cuda")
    expected = reference(
        query, *(c[-12:].clone() for c in cache), cu_q, lengths, None, table - (blocks - 12),
        max_seqlen_q=max(q_lens), causal=True, **options,
    )[0]  # fmt: skip
    function = nt.paged_attention_fp8 if fp8 else nt.paged_attention
    result, _ = function(
        query, *cache, cu_q, lengths, None, table, max_seqlen_q=max(q_lens), causal=True,
        **options,
    )  # fmt: skip
    return result, expected


def calls(name, dtype):
    """A paged decode step appending one entry per request, and ragged packed queries
    and keys under a causal sliding window with softcapping."""

    def decode(make):
        query = make((2, 1, 8, 64), dtype)
        caches = [make((6, 16, 2, 64), dtype) for _ in "kv"]
        new = [make((2, 1, 2, 64), dtype) for _ in "kv"]
        device = query.device
        table = torch.arange(6, dtype=torch.int32, device=device).view(2, 3)
        lengths = torch.full((2,), 20, dtype=torch.int32, device=device)
        return (query, *caches), {
            "seqused_k": lengths, "block_table": table, "key_new": new[0], "value_new": new[1],
            "causal": True,
        }  # fmt: skip

    def ragged(make):
        query = make((9, 4, 128), dtype)
        key, value = (make((40, 2, 128), dtype) for _ in "kv")
        device = query.device
        cu_q = torch.arange(4, dtype=torch.int32, device=device) * 3
        cu_k = torch.arange(4, dtype=torch.int32, device=device) * 13
        return (query, key, value, cu_q), {
            "cu_seqlens_k": cu_k, "max_seqlen_q": 3, "causal": True, "window_left": 5,
            "softcap": 20.0,
        }  # fmt: skip

    return [
        Call(f"{name} paged decode appending", name, decode, reference),
        Call(f"{name} ragged packed", name, ragged, reference),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, reference, (torch.float16, torch.bfloat16), atol=_atol)


def _draw(d, op, cache_dtype=None):
    """A random ragged batch over a paged, packed or dense cache (of `cache_dtype`, by
    default the queries'); lengths and tables contiguous int32 (as FlashAttention
    requires them)."""
    dtype = d.principal((torch.float16, torch.bfloat16))
    batch, heads_kv, group = d.rng.randint(1, 4), d.pick((1, 2, 4)), d.pick((1, 2, 4, 8))
    head_dim = d.pick((64, 128, 96, 256))
    q_lens = [d.pick((1, 1, 2, 5, 17, 40)) for _ in range(batch)]
    k_lens = [n + d.rng.randint(0, 90) for n in q_lens]
    layout = d.pick(("paged", "packed", "dense"))

    def tensor(shape, kind=dtype):  # mostly contiguous: a strided head_dim is refused
        layout = d.pick(("plain", "plain", "plain", "any"))
        # No negative bit or wrapper for FP8, which torch cannot negate.
        exotic = kind != torch.float8_e4m3fn
        return d.tensor(shape, kind, layout=layout, specials=None, scale=1.0, exotic=exotic)

    def cache(shape):
        return tensor(shape, cache_dtype or dtype)

    def int32(values):
        values = torch.tensor(values, dtype=torch.int32)
        return d.tensor(values.shape, torch.int32, layout="plain", exotic=False, values=values)

    def offsets(lengths):
        return int32([0, *torch.tensor(lengths).cumsum(0).tolist()])

    query = tensor((sum(q_lens), heads_kv * group, head_dim))
    kwargs = {"max_seqlen_q": max(q_lens), "causal": d.chance(0.6)}
    if layout == "packed":
        keys = (sum(k_lens), heads_kv, head_dim)
        args = [query, cache(keys), cache(keys), offsets(q_lens)]
        kwargs["cu_seqlens_k"] = offsets(k_lens)
    else:
        page = d.pick((1, 16, 17, 64)) if layout == "paged" else max(k_lens) + 8
        width = -(-(max(k_lens) + 8) // page)
        blocks = batch * width if layout == "paged" else batch
        shape = (blocks, page, heads_kv, head_dim)
        args = [query, cache(shape), cache(shape), offsets(q_lens)]
        kwargs["seqused_k"] = int32(k_lens)
        if layout == "paged":
            order = torch.randperm(blocks, generator=d.generator)
            kwargs["block_table"] = int32(order.view(batch, width).tolist())
    if d.chance(0.2):
        kwargs["window_left"] = d.rng.randint(0, 30)
    if d.chance(0.2):
        kwargs["softcap"] = d.pick((5.0, 30.0))
    return tuple(args), kwargs


def _atol(args, kwargs, precision):
    largest = args[2].abs().double().amax()
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(args[0].dtype, 1e-4) * largest


def interpreted(make):
    """The kernel under Triton's interpreter (CPU, fp16, head_dim 64, unsplit 16x16
    tiles): a paged decode-and-append step of uniform queries, and ragged packed queries
    over packed keys under a causal sliding window with softcapping, against the dense
    reference; the appended entries land in their pages."""
    kernel = make(
        "paged_attention", 3, "fp16", head_dim="64", block_size_m=16, block_size_n=16,
        block_size_d=64, parts=1,
    )  # fmt: skip
    torch.manual_seed(0)
    half, dim, heads_kv, group, page = torch.float16, 64, 2, 3, 5

    def plan(units, queries):
        return torch.zeros((), dtype=half).expand(heads_kv, units, 1, min(queries, 9))

    # Uniform queries (batch 2, 2 each) over a paged cache, 2 new entries each.
    batch, q_len = 2, 2
    query = torch.randn(batch * q_len, heads_kv * group, dim, dtype=half)
    caches = [torch.randn(8, page, heads_kv, dim, dtype=half) for _ in "kv"]
    table = torch.tensor([[3, 0, 6], [5, 1, 2]], dtype=torch.int32)
    lengths = torch.tensor([7, 11], dtype=torch.int32)
    new = [torch.randn(batch, q_len, heads_kv, dim, dtype=half) for _ in "kv"]
    expected = [c.clone() for c in caches]
    want, want_lse = reference(
        query.view(batch, q_len, heads_kv * group, dim), *expected, None, lengths,
        block_table=table, key_new=new[0], value_new=new[1], causal=True,
    )  # fmt: skip
    out, lse = torch.empty_like(query), torch.empty(batch, heads_kv * group, q_len)
    units = batch * q_len * group // 16 + batch
    kernel(
        plan(units, q_len), out, query, *caches, *new, lengths, lengths, lengths, table, lse,
        1 / math.sqrt(dim), 0.0, -1, 0, q_len, -1, 0, 0, page, q_len, 1 << 30, batch,
    )  # fmt: skip
    torch.testing.assert_close(out.view(want.shape).float(), want.float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(lse, want_lse, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(caches[0], expected[0], rtol=0, atol=0)  # the entries written

    # Ragged packed queries over packed keys, causal, a window of 4, softcap 7.
    q_lens = [1, 4, 3]  # over 6, 9 and 3 keys
    cu_q = torch.tensor([0, 1, 5, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 6, 15, 18], dtype=torch.int32)
    query = torch.randn(8, heads_kv * group, dim, dtype=half)
    keys, values_ = (torch.randn(18, heads_kv, dim, dtype=half) for _ in "kv")
    want, want_lse = reference(
        query, keys, values_, cu_q, None, cu_k, causal=True, window_left=4, softcap=7.0
    )
    out, lse = torch.empty_like(query), torch.empty(heads_kv * group, 8)
    units = 8 * group // 16 + 3
    kernel(
        plan(units, max(q_lens)), out, query, keys[None], values_[None], keys[None],
        values_[None], cu_q, cu_k, cu_k, cu_q[None], lse[None], 1 / math.sqrt(dim), 7.0, 4,
        0, 0, -1, 1, 1, 0, 0, 1 << 30, 3,
    )  # fmt: skip
    torch.testing.assert_close(out.float(), want.float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(lse, want_lse, rtol=1e-3, atol=1e-3)
    _split_decode(make)


def _split_decode(make):
    """Split decode under Triton's interpreter (fp16, head_dim 64, 16-key blocks, up to
    8 parts): a GQA batch of ragged lengths (none, short, long) over a paged cache, its
    keys split per request (the grid's parts, min_chunk keys at least) and balanced over
    the batch (kernels/_lib/paged.py's balanced_item: min_chunk -(target << 16 |
    least)), one or two queries a request, against the dense reference."""
    half, dim, heads_kv, group, page, parts = torch.float16, 64, 2, 4, 8, 8
    kernel = make(
        "paged_attention", 3, "fp16", head_dim="64", block_size_m=16, block_size_n=16,
        block_size_d=64, parts=parts, workspace=1 << 20,
    )  # fmt: skip
    torch.manual_seed(1)
    lengths = torch.tensor([0, 5, 150, 33, 90], dtype=torch.int32)
    batch, width = len(lengths), 20
    caches = [torch.randn(batch * width, page, heads_kv, dim, dtype=half) for _ in "kv"]
    table = torch.randperm(batch * width, dtype=torch.int32).view(batch, width)
    for q_len, grid_parts, min_chunk in (
        (1, 4, 16),
        (2, 8, 32),
        (1, 3, -(9 << 16 | 16)),
        (2, 4, -(14 << 16 | 32)),
    ):
        query = torch.randn(batch * q_len, heads_kv * group, dim, dtype=half)
        want, want_lse = reference(
            query.view(batch, q_len, heads_kv * group, dim), *caches, None, lengths,
            block_table=table, causal=True,
        )  # fmt: skip
        out, lse = torch.empty_like(query), torch.empty(batch, heads_kv * group, q_len)
        units = batch * q_len * group // 16 + batch
        plan = torch.zeros((), dtype=half).expand(heads_kv, units, grid_parts, q_len)
        kernel(
            plan, out, query, *caches, *caches, lengths, lengths, lengths, table, lse,
            1 / math.sqrt(dim), 0.0, -1, 0, q_len, -1, 0, 0, page, 0, min_chunk, batch,
        )  # fmt: skip
        torch.testing.assert_close(out.view(want.shape).float(), want.float(), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(lse, want_lse, rtol=1e-3, atol=1e-3)
