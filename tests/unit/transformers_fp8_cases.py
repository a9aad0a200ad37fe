"""FP8 checkpoints under ntops_prebuilt.integrations.transformers on the CPU (run with
transformers_cases.py, whose served path they take): transformers' FP8Linear (finegrained
FP8, "quant_method": "fp8") served by the wheel's quantization and FP8 products, blocks
of 128 x 128 and one scale per weight; a dequantized one by its products; what the wheel
cannot serve runs FP8Linear's own forward, with one warning naming why. On the CPU,
FP8Linear's own forward (Triton kernels, compiled or fetched from the hub) cannot run: a
float forward of its quantized weights stands in for it."""

import warnings

import pytest
import torch
import transformers
from packaging.version import Version
from transformers.integrations import finegrained_fp8

import ntops_prebuilt.integrations.transformers as ntt
from tests.hf_models import dequantized, fp8, prompts, tiny
from tests.unit.transformers_fixtures import fallbacks, logits, relative

# FP8Linear takes block_size None (one scale per weight) and static activation scales
# from 5.0 on.
PER_TENSOR = pytest.mark.skipif(
    Version(transformers.__version__).major < 5,
    reason="transformers 4.x's FP8Linear takes blocks only",
)
# The relative error (Frobenius, over the logits) of the served FP8 path against the
# float32 products of the same quantized weights: its activations quantized to e4m3
# (3 mantissa bits: 2-4% a product, compounded over two layers). Measured 0.043-0.047
# over these cases; each weight block scaled by another block's scale gave 0.15-0.17.
BOUND = 0.08
LAYER_LINEARS = 7  # q, k, v, o, gate, up, down
LAYER_PRODUCTS = 4  # q/k/v fused, o, gate/up fused, down


def _is_linear(module):
    return type(module) is torch.nn.Linear


def _fp8_model(family, **options):
    return fp8(tiny(family), **options)


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # Qwen2: q, k and v with biases
def test_block_scaled_linears_run_the_wheels_fp8_products(family, served_by_references):
    model = _fp8_model(family)
    ids, mask = prompts()
    want = logits(dequantized(model), ids, mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        got = logits(model, ids, mask)
    assert fallbacks(caught) == []
    layers = model.config.num_hidden_layers
    assert len(patched.modules["fp8_linear"]) == LAYER_LINEARS * layers
    assert len(patched.modules["projections"]) == 2 * layers  # attention's and the MLP's
    calls = served_by_references
    assert calls["per_token_group_quant_fp8"] == LAYER_PRODUCTS * layers, calls
    assert calls["w8a8_block_fp8_matmul"] == LAYER_PRODUCTS * layers, calls
    assert calls["mm"] + calls["addmm"] == 1, calls  # lm_head, not quantized
    assert relative(got, want) < BOUND
    patched.remove()
    assert "forward" not in vars(model.model.layers[0].mlp.down_proj)
    assert not hasattr(model.model.layers[0].self_attn, "ntops_fused_scale")


def test_fused_fp8_projections_give_each_linears_outputs(served_by_references):
    """q/k/v and gate/up fused (their weights and block scales rows of one buffer each):
    the product equals each linear's own served product side by side, and the
    parameters keep their values (their storage shared until `remove`)."""
    model = _fp8_model("qwen2")
    attention = model.model.layers[1].self_attn
    before = {n: p.detach().clone() for n, p in attention.named_parameters()}
    ntt.apply(model)
    from ntops_prebuilt.integrations.transformers._fused import Fused

    linears = (attention.q_proj, attention.k_proj, attention.v_proj)
    fused = Fused(attention, linears)  # as apply made it: anew over the same parameters
    x = torch.randn(2, 5, model.config.hidden_size)
    parts = torch.cat([linear(x) for linear in linears], -1).view(10, -1)
    torch.testing.assert_close(fused(x), parts, rtol=0, atol=0)
    for name, parameter in attention.named_parameters():
        torch.testing.assert_close(parameter, before[name], rtol=0, atol=0)
    scale = attention.q_proj.weight_scale_inv
    assert scale.untyped_storage().data_ptr() == fused.scale.untyped_storage().data_ptr()


@PER_TENSOR
@pytest.mark.parametrize("activation_scale", [None, 0.02])
def test_per_tensor_scaled_linears_run_scaled_mm(activation_scale, served_by_references):
    """One scale per weight: activations per token (dynamic) or by the checkpoint's
    static scale (one value, saturating what exceeds it)."""
    model = _fp8_model("qwen2", block_size=None, activation_scale=activation_scale)
    ids, mask = prompts()
    want = logits(dequantized(model), ids, mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        got = logits(model, ids, mask)
    assert fallbacks(caught) == []
    linears = LAYER_LINEARS * model.config.num_hidden_layers
    calls = served_by_references
    assert calls["scaled_fp8_quant"] == calls["scaled_mm"] == linears, calls
    assert calls["per_token_group_quant_fp8"] == 0, calls
    assert relative(got, want) < BOUND


def test_a_dequantized_fp8_linear_is_a_product(served_by_references):
    """FineGrainedFP8Config(dequantize=True) keeps FP8Linear with a float weight."""
    model = tiny("llama")
    dense = logits(model, *prompts())
    weights = {name: linear.weight for name, linear in model.named_modules() if _is_linear(linear)}
    for name, linear in fp8(model).named_modules():
        if type(linear) is finegrained_fp8.FP8Linear:
            linear.weight = weights[name]
    ntt.apply(model)
    torch.testing.assert_close(logits(model, *prompts()), dense, rtol=1e-4, atol=1e-5)
    assert served_by_references["w8a8_block_fp8_matmul"] == 0
    assert served_by_references["mm"] == 2 * LAYER_LINEARS + 1


def _stand_in(monkeypatch):
    """FP8Linear's own forward made a float product of its quantized weights (its Triton
    kernels do not run on the CPU), counting its calls."""
    calls = []

    def forward(self, x):
        calls.append(1)
        (n, k), scales = self.weight.shape, self.weight_scale_inv.float()
        rows, columns = scales.shape if scales.ndim else (1, 1)  # as quantized
        blocks = self.weight.float().reshape(rows, n // rows, columns, k // columns)
        weight = blocks * scales.reshape(rows, 1, columns, 1)
        out = x.float() @ weight.reshape(n, k).t()
        return (out if self.bias is None else out + self.bias).to(x.dtype)

    monkeypatch.setattr(finegrained_fp8.FP8Linear, "forward", forward)
    return calls


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda linear: setattr(linear, "block_size", (64, 128)),
            "blocks of [64, 128] (its w8a8_block_fp8_matmul kernels take 128 x 128)",
        ),
        (
            lambda linear: setattr(
                linear, "activation_scale", torch.nn.Parameter(torch.tensor(0.1))
            ),
            "a static activation scale with block-scaled weights (built: dynamic, per group)",
        ),
        (
            lambda linear: setattr(
                linear,
                "weight_scale_inv",
                torch.nn.Parameter(linear.weight_scale_inv.double(), requires_grad=False),
            ),
            "weight scales of torch.float64 (the wheel's FP8 products take float32 ones)",
        ),
    ],
)
def test_what_the_wheel_cannot_serve_runs_fp8_linears_own_forward(
    monkeypatch, served_by_references, change, why
):
    own = _stand_in(monkeypatch)
    model = _fp8_model("llama")
    change(model.model.layers[1].mlp.down_proj)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        logits(model, *prompts())
    assert fallbacks(caught) == [f"ntops_prebuilt: FP8Linear runs transformers' own code: {why}"]
    assert len(own) == 1
    assert served_by_references["w8a8_block_fp8_matmul"] == 2 * LAYER_PRODUCTS - 1


def test_without_the_wheels_fp8_kernels_fp8_linears_stay_their_own(monkeypatch):
    """On the CPU, with the tests' wheel (sm_80: no FP8 kernels), or CPU tensors."""
    from ntops_prebuilt.integrations.transformers import _served

    own = _stand_in(monkeypatch)
    model = _fp8_model("llama")
    want = logits(model, *prompts())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        got = logits(model, *prompts())
    missing = _served.Served.of_wheel(None).missing("per_token_group_quant_fp8")
    why = "cpu tensors (the wheel's kernels run on CUDA devices)" if missing is None else missing
    assert f"ntops_prebuilt: FP8Linear runs transformers' own code: {why}" in fallbacks(caught)
    assert torch.equal(got, want)
    assert len(own) == 2 * 2 * LAYER_LINEARS
