"""silu_mul_quant_fp8: silu(input) * other then FP8 quantization per token or per group
of 128, against the reference (the same math in torch's fp32): exp differs from
torch's in the last bit at times, so values are compared within a unit of e4m3fn
(tests/ops/rms_norm_quant_fp8.py's `within_a_unit`)."""

import torch

from tests.gpu.layouts import strided
from tests.ops.per_token_group_quant_fp8 import interpreted_exactly, references
from tests.ops.rms_norm_quant_fp8 import within_a_unit

E4M3 = torch.float8_e4m3fn


def reference(*args, **kwargs):
    return references().silu_mul_quant_reference(*args, **kwargs)


def num_tensors(variant):
    return 4  # input, other, scale, output


def run(nt, variant, spec, dtype, bucket):
    per_row = variant["switches"]["group"] == "row"
    n = (256 if spec.aligned else 200) if per_row else (256 if spec.aligned else 384)
    wide = spec.width == 64
    x = strided((5, n), dtype, unit=spec.unit[0], aligned=spec.aligned, wide=wide)
    y = strided((5, n), dtype, unit=spec.unit[1], aligned=spec.aligned, wide=wide)
    group = None if per_row else 128
    return nt.silu_mul_quant_fp8(x, y, group), reference(x, y, group)


def check(result, expected, variant, dtype):
    within_a_unit(result, expected)


def calls(name, dtype):
    from tests.calls import Call

    def per_token(make):
        return (make((3, 4, 256), dtype), make((3, 4, 256), dtype)), {}

    def grouped(make):
        return (make((5, 384), dtype), make((5, 384), dtype)), {"group_size": 128}

    return [
        Call(f"{name} per token", name, per_token, reference),
        Call(f"{name} in groups of 128", name, grouped, reference),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    # Its tolerance is the declaration's: one e4m3fn unit.
    return Spec(_draw, reference, (torch.float16, torch.bfloat16, torch.float32))


def _draw(d, op):
    dtype = d.principal((torch.float16, torch.bfloat16, torch.float32))
    grouped = d.chance(0.5)
    n = 128 * d.pick((1, 2, 3, 8)) if grouped else d.pick((32, 96, 200, 1000, 4096))
    shape = (*d.pick(((1,), (7,), (2, 3))), n)
    scale = d.pick((1.0, 1e-3, 30.0))
    x, y = d.tensor(shape, dtype, scale=scale), d.tensor(shape, dtype, scale=scale)
    return (x, y), {"group_size": 128} if grouped else {}


def interpreted(make):
    """Both kernels under Triton's interpreter (CPU), fp32 and fp16: groups of 128 over
    rows of 512, whole rows of three 8192-element tiles."""
    for dtype, torch_dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        for group, n in (("128", 512), ("row", 20000)):
            x, y = (torch.randn(10, n).to(torch_dtype) for _ in "xy")
            groups = n // 128 if group == "128" else 1
            scales, out = torch.empty(10, groups), torch.empty(10, n, dtype=E4M3)
            floor = references().fused_floor(n, 128 if group == "128" else None)
            make("silu_mul_quant_fp8", 2, dtype, group=group)(x, y, scales, floor, out)
            want = reference(x, y, 128 if group == "128" else None)
            torch.testing.assert_close(scales, want[1], rtol=1e-5, atol=0)
            interpreted_exactly((out, want[1]), want)
