"""rms_norm_quant_fp8: rms_norm then FP8 quantization per token or per group of 128,
against the reference (F.rms_norm in fp32, then the same quantization): the sums of
squares add up in another order, so a value may round to the next e4m3fn value where
the reference's sits on a boundary (`within_a_unit`)."""

import torch

from tests.gpu.layouts import strided
from tests.ops.per_token_group_quant_fp8 import interpreted_exactly, references

E4M3 = torch.float8_e4m3fn


def reference(*args, **kwargs):
    return references().rms_norm_quant_reference(*args, **kwargs)


def num_tensors(variant):
    return 4  # input, weight, scale, output


def run(nt, variant, spec, dtype, bucket):
    per_row = variant["switches"]["group"] == "row"
    n = (256 if spec.aligned else 200) if per_row else (256 if spec.aligned else 384)
    x = strided((5, n), dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    weight = strided((n,), dtype, unit=spec.unit[1], aligned=spec.aligned)
    group = None if per_row else 128
    return nt.rms_norm_quant_fp8(x, weight, 1e-6, group), reference(x, weight, 1e-6, group)


def check(result, expected, variant, dtype):
    within_a_unit(result, expected)


def within_a_unit(result, expected):
    """Scales within a few fp32 ulps of the reference's, values equal to its or one
    e4m3fn value away (where fp32 sums in another order cross a rounding boundary),
    nearly all equal, NaN where it has NaN."""
    (values, scales), (want_values, want_scales) = result, expected
    assert values.dtype == E4M3
    assert values.shape == want_values.shape
    assert scales.shape == want_scales.shape
    torch.testing.assert_close(scales, want_scales, rtol=1e-5, atol=0, equal_nan=True)
    got, want = values.float(), want_values.float()
    assert torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    unit = torch.exp2(torch.floor(torch.log2(want.abs().clamp(min=2**-6))) - 3)
    assert ((got - want).abs()[finite] <= unit[finite]).all()
    assert (got[finite] == want[finite]).float().mean() >= 0.99


def calls(name, dtype):
    from tests.calls import Call

    def per_token(make):
        return (make((3, 4, 256), dtype), make((256,), dtype)), {}

    def grouped(make):
        return (make((5, 384), dtype), make((384,), dtype)), {"group_size": 128, "eps": 1e-5}

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
    leading = d.pick(((1,), (7,), (2, 3)))
    x = d.tensor((*leading, n), dtype, scale=d.pick((1.0, 1e-3, 300.0)))
    weight = d.tensor((n,), dtype, specials=None)
    kwargs = {"group_size": 128} if grouped else {}
    if d.chance(0.3):
        kwargs["eps"] = d.pick((1e-6, 1e-5))
    return (x, weight), kwargs


def interpreted(make):
    """Both kernels under Triton's interpreter (CPU), fp32 and fp16: groups of 128 over
    rows of 512, whole rows of three 2048-element tiles, a row with an outlier."""
    for dtype, torch_dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        for group, n in (("128", 512), ("row", 5000)):
            x = torch.randn(10, n).to(torch_dtype)
            x[3, 7] = 40.0
            weight = torch.randn(n).to(torch_dtype)
            groups = n // 128 if group == "128" else 1
            scales, out = torch.empty(10, groups), torch.empty(10, n, dtype=E4M3)
            floor = references().fused_floor(n, 128 if group == "128" else None)
            kernel = make("rms_norm_quant_fp8", 2, dtype, group=group)
            kernel(x, weight, 1e-6, scales, floor, out)
            want = reference(x, weight, 1e-6, 128 if group == "128" else None)
            torch.testing.assert_close(scales, want[1], rtol=1e-5, atol=0)
            interpreted_exactly((out, want[1]), want)
