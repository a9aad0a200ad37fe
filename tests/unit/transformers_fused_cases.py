"""The fused projections of ntops_prebuilt.integrations.transformers on the CPU (run with
transformers_cases.py, whose served path they take): one product for an attention's q, k
and v and for an MLP's gate and up, the rotation of q and k in place; weights that follow
the parameters through writes, conversions and save_pretrained; Gemma's 1 + weight added
once per weight; and transformers' own forward where the fused one does not apply."""

import warnings

import pytest
import torch
import transformers

import ntops_prebuilt.integrations.transformers as ntt
from tests.hf_models import prompts, tiny
from tests.unit.transformers_fixtures import FAMILIES, fallbacks, logits


@pytest.mark.parametrize("family", FAMILIES)
def test_fused_projections_are_one_product_and_one_rotation(family, served_by_references):
    """Per layer: one product for q, k and v, one for gate and up, o_proj and down_proj;
    q and k rotated in one launch, in place (two where q and k are normalised first)."""
    model = tiny(family)
    ids, mask = prompts()
    ntt.apply(model)
    logits(model, ids, mask)
    calls, layers = served_by_references, model.config.num_hidden_layers
    assert calls["mm"] + calls["addmm"] == 4 * layers + 1, calls  # and lm_head
    normed = family in ("qwen3", "gemma3_text")
    assert calls["rotary_position_embedding"] == layers * (2 if normed else 1), calls


def test_fused_weights_follow_writes_and_conversions(served_by_references):
    """Writes into the parameters (load_state_dict) reach the fused weights, which are
    their storage; after a conversion (each parameter a storage of its own, the buffers
    converted too) the next call fuses anew, and the parameters share one storage again;
    hooked linears are never fused."""
    model, other = tiny("qwen2"), tiny("qwen2", seed=1)
    ids, mask = prompts()
    want = logits(other, ids, mask)
    ntt.apply(model)
    model.load_state_dict(other.state_dict())
    torch.testing.assert_close(logits(model, ids, mask), want, rtol=1e-4, atol=1e-5)
    attention = model.model.layers[0].self_attn
    with torch.no_grad():
        for parameter in model.parameters():  # what .to() of another device does
            parameter.data = parameter.data.clone()
        for name, buffer in model.named_buffers():
            if "ntops_fused" in name and buffer is not None:
                buffer.zero_()  # stale: the next call must not read them
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(logits(model, ids, mask), want, rtol=1e-4, atol=1e-5)
    assert fallbacks(caught) == []
    storages = {
        p.untyped_storage().data_ptr()
        for p in (attention.q_proj.weight, attention.v_proj.weight, attention.ntops_fused_weight)
    }
    assert len(storages) == 1
    hooked = tiny("qwen2")
    seen = []
    hooked.model.layers[0].self_attn.k_proj.register_forward_hook(lambda *_: seen.append(1))
    patched = ntt.apply(hooked)
    assert "model.layers.0.self_attn" not in patched.modules["projections"]
    assert "model.layers.1.self_attn" in patched.modules["projections"]
    logits(hooked, ids, mask)
    assert seen == [1]


def test_a_model_with_fused_projections_saves_and_reloads(tmp_path):
    """The fused rows are disjoint views of one storage: save_pretrained clones them
    (safetensors takes no aliases), the buffers are not saved."""
    model = tiny("qwen2")
    ntt.apply(model)
    model.save_pretrained(tmp_path)
    saved = model.state_dict()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).state_dict()
    assert set(loaded) == set(saved)
    assert all(torch.equal(loaded[name], saved[name]) for name in saved)


def test_gemmas_one_plus_weight_is_added_once_per_weight(served_by_references):
    """Gemma's norms scale by 1 + weight: added when a weight is first seen or has
    changed (its version moves on writes), not on every call."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Adds(TorchDispatchMode):  # additions to 1-D float tensors: the norms' weights
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            first = args[0]
            if func.__name__.startswith("add") and first.ndim == 1 and first.is_floating_point():
                self.count += 1
            return func(*args, **(kwargs or {}))

    model, stock = tiny("gemma3_text"), tiny("gemma3_text")
    ids, mask = prompts(padding=0)
    ntt.apply(model)
    norms = sum(type(m).__name__ == "Gemma3RMSNorm" for m in model.modules())
    counts = []
    for _ in range(2):
        with Adds() as adds:
            logits(model, ids, mask)
        counts.append(adds.count)
    assert counts == [norms, 0]  # every norm's once, then none
    with torch.no_grad():
        for one in (model, stock):
            one.model.layers[1].post_feedforward_layernorm.weight.mul_(-2)
    got, want = logits(model, ids, mask), logits(stock, ids, mask)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_another_attn_implementation_after_apply_runs_transformers_forward(
    served_by_references,
):
    model = tiny("llama")
    ids, mask = prompts()
    want = logits(model, ids, mask)
    ntt.apply(model)
    model.set_attn_implementation("sdpa")
    torch.testing.assert_close(logits(model, ids, mask), want, rtol=1e-4, atol=1e-5)
    assert served_by_references["scaled_dot_product_attention"] == 0
    # q, k, v and o one by one, the MLP's fused: 6 a layer, and lm_head
    assert served_by_references["mm"] == 13


def test_a_forward_another_library_set_on_a_module_is_kept(served_by_references):
    """A forward set on a module instance by another library (compressed-tensors'
    quantize-dequantize, accelerate's hooks): `apply` neither replaces it nor fuses the
    module into its neighbours' product, and says so once; the rest is served."""
    import types

    model = tiny("llama")
    ids, mask = prompts()
    want = logits(model, ids, mask)
    k_proj = model.model.layers[0].self_attn.k_proj
    seen = []

    def quantized_forward(self, x):  # another library's, calling the class's
        seen.append(1)
        return type(self).forward(self, x)

    k_proj.forward = types.MethodType(quantized_forward, k_proj)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        got = logits(model, ids, mask)
    theirs = f"{__name__}.test_a_forward_another_library_set_on_a_module_is_kept.<locals>"
    assert fallbacks(caught) == [
        f"ntops_prebuilt: nn.Linear runs transformers' own code: its forward is "
        f"{theirs}.quantized_forward, set on the module: kept"
    ]
    assert seen == [1]
    assert "model.layers.0.self_attn.k_proj" not in patched.modules["linear"]
    assert "model.layers.0.self_attn" not in patched.modules["projections"]
    assert "model.layers.1.self_attn" in patched.modules["projections"]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    patched.remove()
    assert k_proj.forward.__func__ is quantized_forward
