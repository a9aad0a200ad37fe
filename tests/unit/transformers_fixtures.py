"""What transformers_cases.py, transformers_fused_cases.py and
transformers_compiled_cases.py share, loaded as a pytest plugin (`-p`) by the one pytest
that test_transformers.py runs them in, with a full wheel on the path: fresh warnings per
case, the family list, and the served path on the CPU (`served_by_references`)."""

import collections

import pytest
import torch

import ntops_prebuilt.integrations.transformers as ntt
import ntops_prebuilt.torch as nt
from ntops_prebuilt import _fp8_reference, _rotary, _scaled_mm, _silu_mul
from ntops_prebuilt.integrations.transformers import _served
from tests.hf_models import CONFIGS

F = torch.nn.functional
FAMILIES = sorted(CONFIGS)


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    """Each case sees its own warnings (the integration warns once per process)."""
    monkeypatch.setattr(_served, "_WARNED", set())


def fallbacks(caught):
    return sorted({str(w.message) for w in caught if issubclass(w.category, ntt.FallbackWarning)})


def relative(got, want):
    """The relative error (Frobenius) of `got` against `want`."""
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def logits(model, ids, mask):
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits


# The wheel's functions as their references compute them, on CPU tensors: what the
# served path hands the wheel, checked against transformers' own computation.
def _softcapped(q, k_cache, v_cache, softmax_scale=None, causal=False, softcap=0.0):
    """flash_attn_with_kvcache over a dense cache, as FlashAttention defines it."""
    group = q.shape[2] // k_cache.shape[2]
    keys, values = (t.repeat_interleave(group, dim=2).float() for t in (k_cache, v_cache))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), keys) * softmax_scale
    scores = softcap * torch.tanh(scores / softcap) if softcap else scores
    if causal:  # bottom-right: query i sees keys up to i + seq_k - seq_q
        seq_q, seq_k = q.shape[1], k_cache.shape[1]
        seen = torch.ones(seq_q, seq_k, dtype=torch.bool).tril(seq_k - seq_q)
        scores = scores.masked_fill(~seen, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), values).to(q.dtype)


def _varlen(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
    causal=False, window_size=(-1, -1), softcap=0.0,
):  # fmt: skip
    """flash_attn_varlen_func over packed keys, as FlashAttention defines it, request by
    request (whose lengths the maxima bound, as the kernel's grid assumes); the window's
    sides count from a query's bottom-right aligned position."""
    assert cu_seqlens_q.dtype == cu_seqlens_k.dtype == torch.int32
    assert int(cu_seqlens_q.diff().max()) <= max_seqlen_q
    assert int(cu_seqlens_k.diff().max()) <= max_seqlen_k
    out = torch.zeros_like(q)
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    bounds = zip(starts_q, starts_q[1:], starts_k, starts_k[1:], strict=False)
    for start_q, end_q, start_k, end_k in bounds:
        keys, values = k[start_k:end_k], v[start_k:end_k]
        group = q.shape[1] // keys.shape[1]
        keys, values = (t.repeat_interleave(group, dim=1).float() for t in (keys, values))
        scores = torch.einsum("qhd,khd->hqk", q[start_q:end_q].float(), keys) * softmax_scale
        scores = softcap * torch.tanh(scores / softcap) if softcap else scores
        seq_q, seq_k = end_q - start_q, end_k - start_k
        at = torch.arange(seq_q)[:, None] + seq_k - seq_q  # each query's aligned key
        distance = at - torch.arange(seq_k)[None, :]  # > 0: keys before it
        left, right = window_size
        seen = torch.ones(seq_q, seq_k, dtype=torch.bool)
        if causal or right >= 0:
            seen &= distance >= (0 if causal else -right)
        if left >= 0:
            seen &= distance <= left
        scores = scores.masked_fill(~seen, float("-inf"))
        out[start_q:end_q] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values).to(q.dtype)
    return out


REFERENCES = {
    "rms_norm": F.rms_norm,
    "mm": torch.mm,
    "addmm": torch.addmm,
    "silu_mul": _silu_mul.reference,
    "gelu": F.gelu,
    "mul": torch.mul,
    "rotary_position_embedding": _rotary.reference,
    "scaled_dot_product_attention": F.scaled_dot_product_attention,
    "flash_attn_with_kvcache": _softcapped,
    "flash_attn_varlen_func": _varlen,
    "per_token_group_quant_fp8": _fp8_reference.group_reference,
    "w8a8_block_fp8_matmul": _scaled_mm.block_reference,
    "scaled_fp8_quant": _fp8_reference.scaled_reference,
    "scaled_mm": _scaled_mm.reference,
}
# The FP8 ops' input dtypes (their kernels are built for sm_89 and sm_90 only: the tests'
# sm_80 wheel has none).
FP8_DTYPES = {
    "per_token_group_quant_fp8": (torch.bfloat16, torch.float16, torch.float32),
    "scaled_fp8_quant": (torch.bfloat16, torch.float16, torch.float32),
    "w8a8_block_fp8_matmul": (torch.float8_e4m3fn,),
    "scaled_mm": (torch.float8_e4m3fn,),
}


@pytest.fixture
def served_by_references(monkeypatch):
    """The served path on the CPU: each of the wheel's functions the integration calls,
    counted, computed by its reference."""
    calls = collections.Counter()
    for name, reference in REFERENCES.items():

        def counted(*args, _name=name, _reference=reference, **kwargs):
            calls[_name] += 1
            return _reference(*args, **kwargs)

        monkeypatch.setattr(nt, name, counted)
    monkeypatch.setattr(_served, "DEVICE", "cpu")
    # The softcapped attention is built for half types only; its mapping is checked in
    # float32 as the rest.
    wheel = _served.Served.of_wheel(None)
    dtypes = {
        **wheel.dtypes,
        **FP8_DTYPES,
        "paged_attention": (*wheel.dtypes["paged_attention"], torch.float32),
    }
    widened = type(wheel)(dtypes, wheel.head_dims, None)
    monkeypatch.setattr(_served.Served, "of_wheel", classmethod(lambda cls, capability: widened))
    return calls
