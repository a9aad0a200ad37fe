"""paged_attention_fp8 (flash_attn_varlen_func and flash_attn_with_kvcache over an FP8
cache): paged_attention's calls with float8_e4m3fn caches and their scales, against the
same dense reference over the same FP8 values and scales (`reference` dequantizes them;
new entries are quantized as the kernel quantizes them)."""

import math

import torch

from tests.calls import Call
from tests.ops import paged_attention
from tests.ops.paged_attention import fp8_cache
from tests.ops.per_token_group_quant_fp8 import interpreted_exactly

E4M3 = torch.float8_e4m3fn
reference = paged_attention.reference


def num_tensors(variant):
    return paged_attention.TENSORS + 2  # and k_scales, v_scales


def run(nt, variant, spec, dtype, bucket):
    """paged_attention's call per kernel (tests/ops/paged_attention.py's run) over an FP8
    cache with a scale per head."""
    return paged_attention.run(nt, variant, spec, dtype, bucket, fp8=True)


def calls(name, dtype):
    """A paged decode step appending one entry per request (a scale per head), and
    ragged packed queries over a paged FP8 cache under a causal sliding window with
    softcapping (one scale)."""

    def decode(make):
        query = make((2, 1, 8, 64), dtype)
        caches = [make((6, 16, 2, 64), E4M3) for _ in "kv"]
        new = [make((2, 1, 2, 64), dtype) for _ in "kv"]
        device = query.device
        table = torch.arange(6, dtype=torch.int32, device=device).view(2, 3)
        lengths = torch.full((2,), 20, dtype=torch.int32, device=device)
        scales = [torch.full((1, 2), 0.5, device=device) for _ in "kv"]
        return (query, *caches), {
            "seqused_k": lengths, "block_table": table, "key_new": new[0], "value_new": new[1],
            "causal": True, "k_descale": scales[0], "v_descale": scales[1],
        }  # fmt: skip

    def ragged(make):
        query = make((9, 4, 128), dtype)
        key, value = (make((5, 16, 2, 128), E4M3) for _ in "kv")
        device = query.device
        cu_q = torch.arange(4, dtype=torch.int32, device=device) * 3
        # Factories, not torch.tensor (which makes no fake tensor under FakeTensorMode):
        # lengths 5, 11, 17 over pages [0, 1], [2, 3], [4, 0].
        lengths = torch.arange(3, dtype=torch.int32, device=device) * 6 + 5
        table = torch.arange(6, dtype=torch.int32, device=device).view(3, 2) % 5
        scale = torch.full((), 0.25, device=device)
        return (query, key, value, cu_q), {
            "seqused_k": lengths, "block_table": table, "max_seqlen_q": 3, "causal": True,
            "window_left": 5, "softcap": 20.0, "k_descale": scale, "v_descale": scale,
        }  # fmt: skip

    return [
        Call(f"{name} FP8 paged decode appending", name, decode, reference),
        Call(f"{name} FP8 ragged paged", name, ragged, reference),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, reference, (torch.float16, torch.bfloat16), atol=_atol)


def _draw(d, op):
    """paged_attention's random call over an FP8 cache, with a scale per tensor, per
    head or per request and head."""
    args, kwargs = paged_attention._draw(d, op, E4M3)
    batch, heads_kv = len(d.logical[args[3]]) - 1, d.shapes[args[1]][0][-2]
    shape = d.pick(((), (heads_kv,), (1, heads_kv), (batch, heads_kv)))
    for name in ("k_descale", "v_descale"):
        scale = torch.rand(shape, generator=d.generator) + 0.25
        kwargs[name] = d.tensor(
            scale.shape, torch.float32, layout="plain", specials=None, exotic=False, values=scale
        )
    return args, kwargs


def _atol(args, kwargs, precision):
    largest = args[2].float().abs().amax() * kwargs["v_descale"].abs().amax()
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2}[args[0].dtype] * largest.double()


def interpreted(make):
    """The kernel under Triton's interpreter (CPU, fp16, head_dim 64, 16-key blocks up
    to 4 parts): a GQA decode-and-append step over a paged FP8 cache with a scale per
    head, split, against the dense reference over the cache as the kernel wrote it (the
    interpreter's conversion to FP8 is not torch's: see interpreted_exactly); the
    entries written near torch's quantization of them."""
    half, dim, heads_kv, group, page, parts = torch.float16, 64, 2, 4, 8, 4
    kernel = make(
        "paged_attention_fp8", 3, "fp16", head_dim="64", block_size_m=16, block_size_n=16,
        block_size_d=64, parts=parts, workspace=1 << 20,
    )  # fmt: skip
    torch.manual_seed(2)
    lengths = torch.tensor([0, 5, 150, 33], dtype=torch.int32)
    batch, width, q_len = len(lengths), 21, 1
    scales = [torch.rand(1, heads_kv) + 0.25 for _ in "kv"]
    caches = [fp8_cache((batch * width, page, heads_kv, dim), s, "cpu") for s in scales]
    table = torch.randperm(batch * width, dtype=torch.int32).view(batch, width)
    new = [torch.randn(batch, q_len, heads_kv, dim, dtype=half) for _ in "kv"]
    query = torch.randn(batch * q_len, heads_kv * group, dim, dtype=half)
    torch_written = [c.clone() for c in caches]
    reference(
        query.view(batch, q_len, -1, dim), *torch_written, None, lengths, block_table=table,
        key_new=new[0], value_new=new[1], causal=True, k_descale=scales[0], v_descale=scales[1],
    )  # fmt: skip
    out, lse = torch.empty_like(query), torch.empty(batch, heads_kv * group, q_len)
    units = batch * q_len * group // 16 + batch
    plan = torch.zeros((), dtype=half).expand(heads_kv, units, parts, q_len)
    kernel(
        plan, out, query, *caches, *new, lengths, lengths, lengths, table, lse,
        *(s.expand(batch, heads_kv) for s in scales), 1 / math.sqrt(dim), 0.0, -1, 0, q_len,
        -1, 0, 0, page, q_len, 16, batch,
    )  # fmt: skip
    for written, want in zip(caches, torch_written, strict=True):
        interpreted_exactly((written, torch.ones(())), (want, torch.ones(())))
    want, want_lse = reference(
        query.view(batch, q_len, -1, dim), *caches, None, lengths + q_len, block_table=table,
        causal=True, k_descale=scales[0], v_descale=scales[1],
    )  # fmt: skip
    torch.testing.assert_close(out.view(want.shape).float(), want.float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(lse, want_lse, rtol=1e-3, atol=1e-3)
