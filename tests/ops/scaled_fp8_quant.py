"""scaled_fp8_quant: FP8 quantization with a scale per tensor (given, or found from
the largest magnitude) or per token; compared with the reference exactly."""

import math

import torch

from tests.gpu.layouts import spec_shape, strided
from tests.ops.per_token_group_quant_fp8 import exactly, interpreted_exactly, references


def _reference():
    return references().scaled_reference


def reference(*args, **kwargs):
    """The declared reference, found when called."""
    return _reference()(*args, **kwargs)


def num_tensors(variant):
    return 3  # input, scale, output


def run(nt, variant, spec, dtype, bucket):
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    scale = torch.tensor([0.004], device="cuda")
    return nt.scaled_fp8_quant(x, scale), _reference()(x, scale)


def check(result, reference, variant, dtype):
    exactly(result, reference)


def calls(name, dtype):
    from tests.calls import Call

    def static(make):
        x = make((3, 5, 64), dtype)
        return (x, torch.full((1,), 0.01, device=x.device)), {}

    def dynamic(make):
        return (make((7, 100), dtype),), {}

    def per_token(make):
        return (make((2, 3, 96), dtype),), {"use_per_token_if_dynamic": True}

    def bounded(make):  # some tokens' largest magnitudes past the bound
        return (make((2, 3, 96), dtype),), {"use_per_token_if_dynamic": True, "scale_ub": 1.5}

    return [
        Call(f"{name} static", name, static, reference),
        Call(f"{name} dynamic", name, dynamic, reference),
        Call(f"{name} per token", name, per_token, reference),
        Call(f"{name} per token, bounded", name, bounded, reference),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, reference, (torch.float16, torch.bfloat16, torch.float32))


def _draw(d, op):
    dtype = d.principal((torch.float16, torch.bfloat16, torch.float32))
    shape = d.shape(low=1)
    x = d.tensor(shape, dtype, scale=d.pick((1.0, 1e-3, 300.0)))
    mode = d.pick(("static", "dynamic", "per token"))
    if mode == "static":
        value = torch.tensor([d.pick((0.001, 0.01, 1.0))])
        scale = d.tensor((1,), torch.float32, layout="plain", exotic=False, values=value)
        return (x, scale), {}
    kwargs = {"use_per_token_if_dynamic": mode == "per token"}
    if mode == "per token" and d.chance(0.3):
        kwargs["scale_ub"] = d.pick((0.01, 1.0, 1200.0))
    return (x,), kwargs


def interpreted(make):
    """The kernel under Triton's interpreter (CPU), fp32 and fp16, a static scale
    broadcast to every element: values past 448 once scaled saturate, infinities and
    NaN become NaN (unchecked here: see interpreted_exactly)."""
    for dtype, torch_dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        x = (torch.randn(3000) * 3).to(torch_dtype)
        x[7], x[8], x[9] = math.inf, -math.inf, math.nan
        x[10] = 1000.0
        scale = torch.tensor([0.02])
        out = torch.empty(3000, dtype=torch.float8_e4m3fn)
        make("scaled_fp8_quant", 1, dtype)(x, scale.expand(3000), out)
        interpreted_exactly((out, scale), reference(x, scale))
        assert out[10].float() == 448
