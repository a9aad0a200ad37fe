"""ntops_prebuilt.integrations.transformers on the CPU, run by test_transformers.py in a
pytest of its own with a full wheel on the path, for the transformers installed:

- which modules `apply` replaces in each family's model, and `remove` putting them back;
- calls the wheel cannot serve (CPU tensors, gradients, an op or activation it lacks, an
  unbuilt head dim, softcapping under a mask) run transformers' own code, with one
  warning per part and reason, and give transformers' results bit for bit;
- the calls it serves, mapped onto the wheel's functions as transformers computes them:
  the wheel's functions replaced by their torch references and the served device made
  the CPU, logits and greedy tokens as transformers' own.

The fused projections are transformers_fused_cases.py's, torch.compile's
transformers_compiled_cases.py's: the same process runs all three.
"""

import collections
import subprocess
import sys
import warnings

import pytest
import torch
import transformers

import ntops_prebuilt.integrations.transformers as ntt
from ntops_prebuilt.integrations.transformers import _served
from tests.hf_models import CONFIGS, prompts, tiny
from tests.unit.transformers_fixtures import FAMILIES, fallbacks, logits


def test_every_family_has_a_model():
    assert set(ntt.FAMILIES) == set(CONFIGS)


def test_importing_the_wheel_imports_no_transformers():
    code = "import sys, ntops_prebuilt; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_apply_replaces_the_familys_modules_and_remove_restores_them(family):
    model = tiny(family)
    prefix = ntt.FAMILIES[family][0]
    expected = collections.defaultdict(list)
    for name, module in model.named_modules():
        kind = {
            f"{prefix}RMSNorm": "norm",
            f"{prefix}MLP": "mlp",
            f"{prefix}RotaryEmbedding": "rotary",
            "Linear": "linear",
        }.get(type(module).__name__)
        if kind is not None:
            expected[kind].append(name)
        if type(module).__name__ in (f"{prefix}MLP", f"{prefix}Attention"):
            expected["projections"].append(name)
    before = model.config._attn_implementation
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
    assert fallbacks(caught) == []
    assert patched.modules == {**expected, "attention": [ntt.NAME]}
    assert len(expected["norm"]) >= 5
    assert len(expected["linear"]) == 15
    assert model.config._attn_implementation == ntt.NAME
    assert all(
        "forward" in model.get_submodule(n).__dict__ for names in expected.values() for n in names
    )
    layer = model.model.layers[0]
    fused = (layer.self_attn.q_proj, layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj)
    storages = [linear.weight.untyped_storage().data_ptr() for linear in fused]
    assert storages[0] == storages[1] != storages[2] == storages[3]  # rows of one weight each
    patched.remove()
    assert model.config._attn_implementation == before
    assert not any("forward" in module.__dict__ for module in model.modules())
    storages = {linear.weight.untyped_storage().data_ptr() for linear in fused}
    assert len(storages) == 4  # their own again


@pytest.mark.parametrize("family", FAMILIES)
def test_cpu_tensors_run_transformers_own_code_with_one_warning_each(family):
    model = tiny(family)
    ids, mask = prompts()
    want = logits(model, ids, mask)
    ntt.apply(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = logits(model, ids, mask)
        again = logits(model, ids, mask)
    assert torch.equal(got, want)
    assert torch.equal(again, want)
    messages = fallbacks(caught)
    assert len(messages) == 5, messages  # norm, rotary, attention, MLP, nn.Linear; once
    assert all("cpu tensors (the wheel's kernels run on CUDA devices)" in m for m in messages)


def test_a_second_apply_replaces_nothing_again(served_by_references):
    model = tiny("gemma3_text")
    ids, mask = prompts()
    first = ntt.apply(model)
    want = logits(model, ids, mask)
    second = ntt.apply(model)
    assert second.modules == {"attention": [ntt.NAME]}
    assert torch.equal(logits(model, ids, mask), want)
    second.remove()
    first.remove()
    assert not any("forward" in module.__dict__ for module in model.modules())


def test_a_calls_tensors_are_refused_for_their_first_difference(served_by_references):
    """Served.refusal's reasons, in its order: the first tensor's device, the dtypes its
    op was built for, the others' dtypes and devices, gradients (DEVICE is the CPU
    here, as the served path's cases run)."""
    served = _served.Served.of_wheel(None)
    x, w = torch.randn(2, 8), torch.randn(4, 8)
    assert served.refusal("mm", x, w) is None
    assert served.refusal("mm", x.to("meta"), w).startswith("meta tensors")
    assert served.refusal("mm", x.double(), w.double()).startswith("float64 tensors (its mm")
    assert served.refusal("mm", x, w.half()) == "mixed dtypes or devices (float32 and float16)"
    assert served.refusal("mm", x, w.to("meta")).startswith("mixed dtypes or devices")
    trained = w.clone().requires_grad_()
    assert served.refusal("mm", x, trained).startswith("gradients")
    with torch.no_grad():
        assert served.refusal("mm", x, trained) is None


def test_gradients_run_transformers_own_code():
    model = tiny("llama")
    ids, mask = prompts()
    ntt.apply(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(ids, attention_mask=mask).logits.sum().backward()  # the CPU's reason comes first
    assert model.lm_head.weight.grad is not None
    assert fallbacks(caught)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("padding", [0, 2])
def test_served_calls_compute_what_transformers_computes(family, padding, served_by_references):
    model = tiny(family)
    ids, mask = prompts(padding=padding)
    want = logits(model, ids, mask)
    want_tokens = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    ntt.apply(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = logits(model, ids, mask)
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    kept = mask.bool()  # a padded query's row is whatever the attention makes of no keys
    torch.testing.assert_close(got[kept], want[kept], rtol=1e-4, atol=1e-5)
    assert torch.equal(tokens, want_tokens)
    calls = served_by_references
    assert calls["rms_norm"], calls
    assert calls["rotary_position_embedding"], calls
    assert calls["mm"] + calls["addmm"] >= 15, calls
    assert calls["silu_mul"] or (calls["gelu"] and calls["mul"]), calls
    if family == "gemma2" and padding:  # softcapping under a padding mask: eager's
        assert calls["flash_attn_with_kvcache"] == calls["scaled_dot_product_attention"] == 0
        assert fallbacks(caught) == [
            "ntops_prebuilt: Gemma2Attention's attention runs transformers' own code: "
            "softcapping with an attention mask (padding, or a static cache): the wheel's "
            "softcapped attention takes lengths, not masks"
        ]
    else:
        assert calls["flash_attn_with_kvcache"] or calls["scaled_dot_product_attention"], calls
        assert fallbacks(caught) == []


def test_unpatched_models_of_a_patched_family_stay_transformers_own(served_by_references):
    other = tiny("llama", seed=1)
    ids, mask = prompts()
    want = logits(other, ids, mask)
    ntt.apply(tiny("llama"))  # its family's apply_rotary_pos_emb now dispatches on tables
    assert torch.equal(logits(other, ids, mask), want)
    assert served_by_references["rotary_position_embedding"] == 0


def test_what_the_wheel_cannot_serve_is_named(monkeypatch, served_by_references):
    lacking = _served.Served.of_wheel(None)
    lacking = type(lacking)(
        {op: d for op, d in lacking.dtypes.items() if op != "rms_norm"},
        lacking.head_dims,
        None,
    )
    monkeypatch.setattr(_served.Served, "of_wheel", classmethod(lambda cls, capability: lacking))
    cases = (
        ("llama", {}, torch.float32),
        ("llama", {"head_dim": 48}, torch.float32),
        ("qwen2", {"hidden_act": "relu"}, torch.float32),
        ("mistral", {}, torch.float64),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for family, overrides, dtype in cases:
            model = tiny(family, dtype=dtype, **overrides)
            ids, mask = prompts()
            patched = ntt.apply(model)
            want = logits(model, ids, mask)
            patched.remove()
            assert torch.equal(want, logits(model, ids, mask))
        gpt2 = transformers.AutoModelForCausalLM.from_config(
            transformers.GPT2Config(n_embd=64, n_layer=1, n_head=2, vocab_size=128)
        )
        assert ntt.apply(gpt2).modules == {}
    own = "runs transformers' own code: "
    assert fallbacks(caught) == [
        f"ntops_prebuilt: GPT2LMHeadModel {own}model_type 'gpt2' is not one of "
        + ", ".join(ntt.FAMILIES),
        f"ntops_prebuilt: LlamaAttention's attention {own}head_dim 48 (its "
        "scaled_dot_product_attention kernels take 32, 64, 96, 128, 256)",
        f"ntops_prebuilt: LlamaRMSNorm {own}the wheel has no rms_norm kernels "
        "(`ntops-aot build --ops rms_norm` adds them)",
        f"ntops_prebuilt: MistralAttention's attention {own}float64 tensors (its "
        "scaled_dot_product_attention kernels are bfloat16, float16, float32)",
        f"ntops_prebuilt: MistralMLP {own}float64 tensors (its silu_mul kernels are "
        "bfloat16, float16, float32)",
        f"ntops_prebuilt: MistralRMSNorm {own}the wheel has no rms_norm kernels "
        "(`ntops-aot build --ops rms_norm` adds them)",
        f"ntops_prebuilt: Qwen2MLP {own}its activation ReLU (the wheel fuses silu and gelu's "
        "tanh form)",
        f"ntops_prebuilt: Qwen2RMSNorm {own}the wheel has no rms_norm kernels "
        "(`ntops-aot build --ops rms_norm` adds them)",
        f"ntops_prebuilt: modeling_mistral.apply_rotary_pos_emb {own}float64 tensors (its "
        "rotary_position_embedding kernels are bfloat16, float16, float32)",
        f"ntops_prebuilt: nn.Linear {own}float64 tensors (its mm kernels are bfloat16, "
        "float16, float32)",
    ]
