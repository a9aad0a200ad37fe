"""compressed-tensors FP8 checkpoints under ntops_prebuilt.integrations.transformers on
the CPU (run with transformers_cases.py, whose served path they take): transformers'
CompressedTensorsFP8Linear (a W8A8 "float" scheme loaded with
`use_optimized_inference=True`) served by the wheel's per-token quantization and its
row-wise scaled product in the activations' dtype. Stock runs torch's scaled_mm
(cuBLASLt's FP8 kernels), which a CPU does not have: a float forward of the quantized
weights stands in for it where a call falls back."""

import warnings

import pytest
import torch
from transformers.integrations import compressed_tensors

import ntops_prebuilt.integrations.transformers as ntt
from ntops_prebuilt._fp8_reference import scaled_reference
from tests.hf_models import compressed, fp8_dense, prompts, tiny
from tests.unit.transformers_fixtures import fallbacks, logits, relative

LAYER_LINEARS = 7  # q, k, v, o, gate, up, down
LAYER_PRODUCTS = 4  # q/k/v fused, o, gate/up fused, down
# The relative error (Frobenius, over the logits) of the served path in bf16 against
# float32 products of the same quantized weights: e4m3 activations and bf16's rounding,
# over two layers, as the FBGEMM cases' (which measured 0.043-0.046 against the same
# bound); each weight row scaled by another row's scale fails it.
BOUND = 0.08


@pytest.mark.parametrize("strategy", ["channel", "tensor"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])  # Qwen2: q, k and v with biases
def test_compressed_linears_run_the_wheels_row_wise_products(
    family, strategy, served_by_references
):
    model = with_biases(compressed(tiny(family, dtype=torch.bfloat16), strategy))
    ids, mask = prompts()
    want = logits(fp8_dense(model), ids, mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        got = logits(model, ids, mask)
    assert fallbacks(caught) == []
    layers = model.config.num_hidden_layers
    assert len(patched.modules["compressed_fp8_linear"]) == LAYER_LINEARS * layers
    assert len(patched.modules["projections"]) == 2 * layers  # attention's and the MLP's
    calls = served_by_references
    assert calls["scaled_fp8_quant"] == calls["scaled_mm"] == LAYER_PRODUCTS * layers, calls
    assert relative(got, want) < BOUND
    patched.remove()
    assert "forward" not in vars(model.model.layers[0].mlp.down_proj)
    assert not hasattr(model.model.layers[0].mlp, "ntops_fused_scale")
    scale = model.model.layers[0].mlp.up_proj.weight_scale
    assert scale.shape == (1, model.config.intermediate_size)


def test_scales_of_other_rows_fail_the_bound(served_by_references):
    """The bound tells a right product from a wrong one: each output feature's weight
    scaled by another feature's scale."""
    model = compressed(tiny("llama", dtype=torch.bfloat16))
    ids, mask = prompts()
    want = logits(fp8_dense(model), ids, mask)
    for module in model.modules():
        if isinstance(module, compressed_tensors.CompressedTensorsFP8Linear):
            module.weight_scale.data = module.weight_scale.data.roll(1, 1)
    ntt.apply(model)
    assert relative(logits(model, ids, mask), want) > BOUND


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_compressed_linear_is_stocks_formula(dtype, served_by_references):
    """Token by token: the activations quantized with their largest magnitude, times the
    weight's scale per output feature, in the activations' dtype (stock's scaled_mm
    gives `out_dtype=input.dtype`), the bias added by the product."""
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("proj", torch.nn.Linear(64, 48, bias=True, dtype=dtype))
    quantized = compressed(model).proj
    served = ntt.Served.of_wheel(None)
    forward = ntt._layers.compressed_fp8_linear(quantized, quantized.forward, served)
    x = torch.randn(2, 5, 64, dtype=dtype)
    x[0, 1] *= 100  # a large token: its own scale
    got = forward(x)
    values, scales = scaled_reference(x.reshape(10, 64), use_per_token_if_dynamic=True)
    assert scales[1, 0] == x[0, 1].float().abs().max() / 448.0
    weight = quantized.weight.float() * quantized.weight_scale.reshape(-1, 1)
    want = ((values.float() * scales) @ weight.t() + quantized.bias.float()).to(dtype)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want.view(2, 5, 48), rtol=1e-2, atol=1e-2)
    assert served_by_references["scaled_mm"] == 1


def test_fused_compressed_projections_give_each_linears_outputs(served_by_references):
    """q/k/v fused (weights rows of one buffer, scales side by side in one (1, out)
    buffer, biases one): the product equals each linear's own served product side by
    side, in float32 activations too (the products' dtype is theirs)."""
    from ntops_prebuilt.integrations.transformers._fused import Fused

    model = with_biases(compressed(tiny("qwen2")))
    attention = model.model.layers[1].self_attn
    ntt.apply(model)
    linears = (attention.q_proj, attention.k_proj, attention.v_proj)
    fused = Fused(attention, linears)
    assert fused.kind == "compressed"
    assert fused.scale.shape == (1, fused.weight.shape[0])
    assert attention.k_proj.weight_scale.data_ptr() != attention.q_proj.weight_scale.data_ptr()
    x = torch.randn(2, 5, model.config.hidden_size)
    parts = torch.cat([linear(x) for linear in linears], -1).view(10, -1)
    torch.testing.assert_close(fused(x), parts, rtol=0, atol=0)


def with_biases(model):
    """`model` with random biases where it has any (transformers initialises them to 0,
    which a product that drops them would match)."""
    with torch.no_grad():
        for module in model.modules():
            kind = isinstance(module, compressed_tensors.CompressedTensorsFP8Linear)
            if kind and module.bias is not None:
                module.bias.normal_(0, 0.5)
    return model


def _stand_in(monkeypatch):
    """CompressedTensorsFP8Linear's own forward made a float product of its quantized
    weights (torch's scaled_mm has no CPU kernel), counting its calls."""
    calls = []

    def forward(self, x):
        calls.append(1)
        weight = self.weight.float() * self.weight_scale.float().reshape(-1, 1)
        out = x.float() @ weight.t() + (0 if self.bias is None else self.bias.float())
        return out.to(x.dtype)

    monkeypatch.setattr(compressed_tensors.CompressedTensorsFP8Linear, "forward", forward)
    return calls


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda linear: setattr(
                linear,
                "weight_scale",
                torch.nn.Parameter(linear.weight_scale.double(), requires_grad=False),
            ),
            "weight scales of torch.float64 and shape [1, 256] (the wheel's row-wise products "
            "take one float32 scale per output feature)",
        ),
        (
            lambda linear: setattr(
                linear,
                "weight",
                torch.nn.Parameter(linear.weight.to(torch.float8_e5m2), requires_grad=False),
            ),
            "torch.float8_e5m2 weights (the wheel's FP8 products take float8_e4m3fn)",
        ),
    ],
)
def test_what_the_wheel_cannot_serve_runs_the_linears_own_forward(
    monkeypatch, served_by_references, change, why
):
    own = _stand_in(monkeypatch)
    model = compressed(tiny("llama", dtype=torch.bfloat16))
    change(model.model.layers[1].mlp.down_proj)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        logits(model, *prompts())
    message = f"ntops_prebuilt: CompressedTensorsFP8Linear runs transformers' own code: {why}"
    assert fallbacks(caught) == [message]
    assert len(own) == 1
    assert served_by_references["scaled_mm"] == 2 * LAYER_PRODUCTS - 1


def test_compressed_tensors_own_quantized_forward_is_kept(served_by_references):
    """A compressed-tensors checkpoint loaded the default way keeps nn.Linears whose
    forward compressed-tensors replaced on the instance (quantize-dequantize of the
    activations per token and of the weights, FP8_DYNAMIC here): `apply` keeps them,
    with one warning, and serves the rest; the logits are stock's."""
    from compressed_tensors.quantization import (
        QuantizationConfig,
        apply_quantization_config,
        preset_name_to_scheme,
    )

    model = tiny("llama")
    scheme = preset_name_to_scheme("FP8_DYNAMIC", ["Linear"])
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"])
    apply_quantization_config(model, config)
    with torch.no_grad():  # the checkpoint's scales: a float32 one per output feature
        for module in model.modules():
            if hasattr(module, "weight_scale"):
                largest = module.weight.abs().amax(1, keepdim=True)
                module.weight_scale.copy_(largest.to(module.weight_scale.dtype) / 448.0)
    ids, mask = prompts()
    want = logits(model, ids, mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        got = logits(model, ids, mask)
    theirs = "compressed_tensors.quantization.lifecycle.forward.set_forward_quantized"
    assert fallbacks(caught) == [
        f"ntops_prebuilt: nn.Linear runs transformers' own code: its forward is "
        f"{theirs}.<locals>.quantized_forward, set on the module: kept"
    ]
    assert "linear" in patched.modules  # the head, which compressed-tensors left alone
    assert patched.modules["linear"] == ["lm_head"]
    assert "projections" not in patched.modules
    assert served_by_references["rms_norm"] > 0
    assert served_by_references["scaled_dot_product_attention"] > 0
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
