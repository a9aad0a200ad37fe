"""Continuous batching (`generate_batch`, transformers 5.x) under
`ntt.batching(model)` on the CPU, run by test_transformers.py with the other cases: the
CPU call falls back with one warning and gives stock's tokens; the served path (the
wheel's functions replaced by their references, the served device the CPU) maps each
packed batch onto flash_attn_varlen_func and gives stock's tokens too; the fallback's
mask over a packed batch is what flash_attn_varlen_func computes."""

import warnings

import pytest
import torch
import transformers
from packaging.version import Version

import ntops_prebuilt.integrations.transformers as ntt
from ntops_prebuilt.integrations.transformers import _batching
from tests.hf_models import prompts, tiny
from tests.unit.transformers_fixtures import FAMILIES, REFERENCES, fallbacks

pytestmark = pytest.mark.skipif(
    Version(transformers.__version__).major < 5,
    reason="continuous batching's packed calls are transformers 5.x's",
)
NEW_TOKENS = 6
# Windows shorter than the prompts, where the family has them: the window matters.
WINDOWS = {family: {"sliding_window": 3} for family in ("mistral", "gemma2", "gemma3_text")}
CPU_REFUSED = (
    "ntops_prebuilt: {}Attention's attention runs transformers' own code: cpu tensors "
    "(the wheel's kernels run on CUDA devices)"
)


def requests():
    """Three prompts of 5, 6 and 7 tokens: prefills of different lengths, then decodes."""
    ids, _ = prompts(batch=3, length=7, padding=0)
    return [row[: 5 + i].tolist() for i, row in enumerate(ids)]


def generate_batch(model):
    """Greedy tokens per request, over a small paged cache (16 pages of 16 tokens)."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    config = GenerationConfig(
        max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0
    )
    paging = ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=64, page_size=16)
    with torch.no_grad():
        out = model.generate_batch(
            requests(), generation_config=config, continuous_batching_config=paging
        )
    return [out[name].generated_tokens for name in sorted(out)]


@pytest.mark.parametrize("family", FAMILIES)
def test_cpu_calls_fall_back_with_one_warning_and_stocks_tokens(family):
    model = tiny(family, **WINDOWS.get(family, {}))
    stock, before = generate_batch(model), model.config._attn_implementation
    with warnings.catch_warnings(record=True) as caught, ntt.batching(model):
        warnings.simplefilter("always")
        assert model.config._attn_implementation == ntt.PAGED
        got = generate_batch(model)
    assert model.config._attn_implementation == before
    assert fallbacks(caught) == [CPU_REFUSED.format(ntt.FAMILIES[family][0])]
    assert got == stock


@pytest.mark.parametrize("family", FAMILIES)
def test_served_batches_give_stocks_tokens(family, served_by_references):
    model = tiny(family, **WINDOWS.get(family, {}))
    stock = generate_batch(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        with ntt.batching(model):
            got = generate_batch(model)
    assert fallbacks(caught) == []
    assert got == stock
    # a prefill of the three, then a decode step per new token after the first
    steps = served_by_references["flash_attn_varlen_func"] // 2  # two layers
    assert steps >= NEW_TOKENS
    # the fused forward's: per layer, q/k/v, o, gate/up and down; then the head
    products = served_by_references["mm"] + served_by_references["addmm"]
    assert products == steps * (2 * 4 + 1), served_by_references
    assert model.config._attn_implementation == ntt.NAME
    patched.remove()


def test_the_fallbacks_packed_mask_is_the_varlen_attentions():
    torch.manual_seed(0)
    # a prefill of 4 (no cache), a decode over 6 cached keys, a chunk of 3 over 2
    cu_q = torch.tensor([0, 4, 5, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 4, 11, 16], dtype=torch.int32)
    q, k, v = torch.randn(1, 4, 8, 64), torch.randn(1, 2, 16, 64), torch.randn(1, 2, 16, 64)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups, module.training = True, 2, False
    kwargs = {"cu_seq_lens_q": cu_q, "cu_seq_lens_k": cu_k, "max_length_q": 4, "max_length_k": 7}
    for window in (None, 3):
        got, _ = _batching._stock(
            module, q, k, v, None, 0.0, 0.125, None, {**kwargs, "sliding_window": window}
        )
        packed = (t[0].transpose(0, 1) for t in (q, k, v))
        want = REFERENCES["flash_attn_varlen_func"](
            *packed, cu_q, cu_k, 4, 7, softmax_scale=0.125, causal=True,
            window_size=_batching._window(window),
        )  # fmt: skip
        torch.testing.assert_close(got[0], want)


def test_batching_where_transformers_updates_the_cache_itself_warns_once(monkeypatch):
    """Older 5.x releases (5.17.0) register "paged|sdpa" and friends, which take the
    cache and update it: `batching` leaves the attention as it is, with one warning."""
    from transformers import AttentionInterface

    assert _batching.packed_batches()  # the tested release's convention
    monkeypatch.setitem(AttentionInterface._global_mapping, "paged|sdpa", lambda *args: None)
    assert not _batching.packed_batches()
    model = tiny("llama")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ntt.batching(model):
            assert model.config._attn_implementation == "sdpa"
    (warned,) = fallbacks(caught)
    assert "passes paged attention functions its cache to update" in warned
