"""FBGEMM FP8 checkpoints under ntops_prebuilt.integrations.transformers on the CPU (run
with transformers_cases.py, whose served path they take): transformers' FbgemmFp8Linear
("quant_method": "fbgemm_fp8") served by the wheel's per-token quantization, bounded by
the checkpoint's activation bound, and its row-wise scaled product. Stock runs these
through fbgemm_gpu's kernels (`torch.ops.fbgemm`), which neither machine has: a float
forward of the quantized weights stands in for it where a call falls back."""

import warnings

import pytest
import torch
from transformers.integrations import fbgemm_fp8

import ntops_prebuilt.integrations.transformers as ntt
from ntops_prebuilt._fp8_reference import scaled_reference
from tests.hf_models import fbgemm, fp8_dense, prompts, tiny
from tests.unit.transformers_fixtures import fallbacks, logits, relative

LAYER_LINEARS = 7  # q, k, v, o, gate, up, down
LAYER_PRODUCTS = 4  # q/k/v fused, o, gate/up fused, down
# The relative error (Frobenius, over the logits) of the served path in bf16 against
# float32 products of the same quantized weights: e4m3 activations (2-4% a product)
# and bf16's rounding, over two layers. Measured 0.043-0.046 (the FP8Linear cases' bound
# is 0.08); each weight row scaled by another row's scale gave 0.32.
BOUND = 0.08


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # Qwen2: q, k and v with biases
def test_fbgemm_linears_run_the_wheels_row_wise_products(family, served_by_references):
    model = fbgemm(tiny(family, dtype=torch.bfloat16))
    ids, mask = prompts()
    want = logits(fp8_dense(model), ids, mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patched = ntt.apply(model)
        got = logits(model, ids, mask)
    assert fallbacks(caught) == []
    layers = model.config.num_hidden_layers
    assert len(patched.modules["fbgemm_fp8_linear"]) == LAYER_LINEARS * layers
    assert len(patched.modules["projections"]) == 2 * layers  # attention's and the MLP's
    calls = served_by_references
    assert calls["scaled_fp8_quant"] == calls["scaled_mm"] == LAYER_PRODUCTS * layers, calls
    assert relative(got, want) < BOUND
    patched.remove()
    assert "forward" not in vars(model.model.layers[0].mlp.down_proj)
    assert not hasattr(model.model.layers[0].mlp, "ntops_fused_scale")


def test_fused_fbgemm_projections_give_each_linears_outputs(served_by_references):
    """gate/up fused (weights and scales per output feature rows of one buffer each):
    the product equals each linear's own served product side by side."""
    model = fbgemm(tiny("qwen2", dtype=torch.bfloat16))
    mlp = model.model.layers[1].mlp
    ntt.apply(model)
    from ntops_prebuilt.integrations.transformers._fused import Fused

    linears = (mlp.gate_proj, mlp.up_proj)
    fused = Fused(mlp, linears)
    x = torch.randn(2, 5, model.config.hidden_size, dtype=torch.bfloat16)
    parts = torch.cat([linear(x) for linear in linears], -1).view(10, -1)
    torch.testing.assert_close(fused(x), parts, rtol=0, atol=0)


def test_one_fbgemm_linear_is_fbgemms_formula(served_by_references):
    """Token by token: the activations quantized with their largest magnitude held at
    the bound (tokens past it saturate), times the weight's scale per output feature,
    rounded to bf16 (f8f8bf16_rowwise's result), the bias added after in float32."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=True)
    model = torch.nn.Sequential()
    model.add_module("proj", linear)
    quantized = fbgemm(model, ub=2.0).proj
    forward = ntt._layers.fbgemm_fp8_linear(quantized, quantized.forward, ntt.Served.of_wheel(None))
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    x[0, 1] *= 10  # a token past the bound
    got = forward(x)
    values, scales = scaled_reference(
        x.reshape(10, 64), use_per_token_if_dynamic=True, scale_ub=2.0
    )
    assert scales[1, 0] == torch.tensor(2.0) / torch.tensor(448.0)  # held at the bound
    product = (values.float() * scales) @ (quantized.weight.float() * quantized.weight_scale).t()
    want = (product.to(torch.bfloat16) + quantized.bias).view(2, 5, 48)
    assert got.dtype == want.dtype == torch.float32  # bf16 plus the float32 bias, as stock
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    assert served_by_references["scaled_mm"] == 1


def test_fused_fbgemm_projections_take_bf16_activations(served_by_references):
    """Their products are bf16 whatever the activations are (FBGEMM's): a float32
    model's attention would rotate q and k in another dtype than its tables'."""
    from ntops_prebuilt.integrations.transformers import _served
    from ntops_prebuilt.integrations.transformers._fused import Fused

    mlp = fbgemm(tiny("llama", dtype=torch.bfloat16)).model.layers[0].mlp
    fused = Fused(mlp, (mlp.gate_proj, mlp.up_proj))
    served = _served.Served.of_wheel(None)
    assert fused.refusal(served, torch.randn(2, 256, dtype=torch.bfloat16)) is None
    why = fused.refusal(served, torch.randn(2, 256))
    assert why == "torch.float32 activations (FbgemmFp8Linear's products are bf16)"


def _stand_in(monkeypatch):
    """FbgemmFp8Linear's own forward made a float product of its quantized weights
    (fbgemm_gpu's kernels are not installed), counting its calls."""
    calls = []

    def forward(self, x):
        calls.append(1)
        out = x.float() @ (self.weight.float() * self.weight_scale.float()).t()
        return out.to(torch.bfloat16) + (0 if self.bias is None else self.bias)

    monkeypatch.setattr(fbgemm_fp8.FbgemmFp8Linear, "forward", forward)
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
            "weight scales of torch.float64 and shape [256, 1] (the wheel's row-wise products "
            "take one float32 scale per output feature)",
        ),
        (
            lambda linear: linear.input_scale_ub.zero_(),
            "an activation bound of 0.0 (input_scale_ub: not filled by the quantizer)",
        ),
    ],
)
def test_what_the_wheel_cannot_serve_runs_fbgemm_linears_own_forward(
    monkeypatch, served_by_references, change, why
):
    own = _stand_in(monkeypatch)
    model = tiny("llama", dtype=torch.bfloat16)
    fbgemm(model)
    change(model.model.layers[1].mlp.down_proj)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        logits(model, *prompts())
    message = f"ntops_prebuilt: FbgemmFp8Linear runs transformers' own code: {why}"
    assert fallbacks(caught) == [message]
    assert len(own) == 1
    assert served_by_references["scaled_mm"] == 2 * LAYER_PRODUCTS - 1


def test_without_the_wheels_fp8_kernels_fbgemm_linears_stay_their_own(monkeypatch):
    """On the CPU, with the tests' wheel (sm_80: no FP8 kernels), or CPU tensors."""
    from ntops_prebuilt.integrations.transformers import _served

    own = _stand_in(monkeypatch)
    model = fbgemm(tiny("llama", dtype=torch.bfloat16))
    want = logits(model, *prompts())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ntt.apply(model)
        got = logits(model, *prompts())
    missing = _served.Served.of_wheel(None).missing("scaled_fp8_quant")
    why = "cpu tensors (the wheel's kernels run on CUDA devices)" if missing is None else missing
    assert f"ntops_prebuilt: FbgemmFp8Linear runs transformers' own code: {why}" in fallbacks(
        caught
    )
    assert torch.equal(got, want)
    assert len(own) == 2 * 2 * LAYER_LINEARS
