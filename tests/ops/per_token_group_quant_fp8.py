"""per_token_group_quant_fp8: FP8 quantization with a scale per row and group of 128,
or per row; compared with the reference exactly (the same IEEE division and
round-to-nearest-even), and special values as torch's cast makes them."""

import functools
import importlib.util
import math
import pathlib

import torch

from tests.gpu.layouts import strided

E4M3 = torch.float8_e4m3fn


def num_tensors(variant):
    return 3  # input, scale, output


def references():
    """The ops' declared references (ntops_prebuilt._fp8_reference): the installed
    wheel's where there is one (the GPU suites), else the source tree's (the CPU ones:
    importing the runtime package loads its _C)."""
    try:
        from ntops_prebuilt import _fp8_reference
    except ImportError:
        return _source_references()
    return _fp8_reference


@functools.cache
def _source_references():
    path = pathlib.Path(__file__).parents[2] / "aot" / "runtime" / "_fp8_reference.py"
    spec = importlib.util.spec_from_file_location("_fp8_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference():
    return references().group_reference


def reference(*args, **kwargs):
    """The declared reference, found when called."""
    return _reference()(*args, **kwargs)


def run(nt, variant, spec, dtype, bucket):
    per_row = variant["switches"]["group"] == "row"
    n = (256 if spec.aligned else 200) if per_row else (256 if spec.aligned else 384)
    x = strided((5, n), dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    group = n if per_row else 128
    return nt.per_token_group_quant_fp8(x, group), _reference()(x, group)


def check(result, reference, variant, dtype):
    exactly(result, reference)


def exactly(result, reference):
    """Values and scales equal to the reference's, NaN where it has NaN."""
    for got, want in zip(result, reference, strict=True):
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def calls(name, dtype):
    from tests.calls import Call

    def grouped(make):
        return (make((3, 4, 256), dtype), 128), {}

    def per_row(make):
        return (make((6, 96), dtype), 96), {"eps": 1e-6}

    def column_major(make):
        return (make((5, 384), dtype), 128), {"column_major_scales": True}

    return [
        Call(f"{name} in groups of 128", name, grouped, reference),
        Call(f"{name} per row", name, per_row, reference),
        Call(f"{name} column-major scales", name, column_major, reference),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, reference, (torch.float16, torch.bfloat16, torch.float32))


def _draw(d, op):
    dtype = d.principal((torch.float16, torch.bfloat16, torch.float32))
    groups = d.pick((1, 2, 3, 8))
    per_row = d.chance(0.3)
    n = d.pick((32, 96, 200, 1000, 4096)) if per_row else 128 * groups
    leading = d.pick(((), (1,), (7,), (2, 3)))
    x = d.tensor((*leading, n), dtype, scale=d.pick((1.0, 1e-3, 300.0)))
    kwargs = {}
    if d.chance(0.3):
        kwargs["eps"] = d.pick((1e-10, 1e-4))
    if len(leading) == 1 and d.chance(0.3):
        kwargs["column_major_scales"] = True
    return (x, n if per_row else 128), kwargs


def interpreted(make):
    """Both kernels under Triton's interpreter (CPU): groups of 128 and whole rows of
    three 4096-element tiles, fp32 and fp16, against the reference; a group holding
    NaN, +-inf, values past 448 once scaled (saturated) and zeros only; whole rows
    with an upper bound of their largest magnitude (scaled_fp8_quant's scale_ub),
    under which one row's 1e4 saturates and the others are as unbounded."""
    group_reference = _reference()
    for dtype in ("fp32", "fp16"):
        torch_dtype = getattr(torch, {"fp32": "float32", "fp16": "float16"}[dtype])
        x = (torch.randn(4, 512) * 3).to(torch_dtype)
        x[1, :128] = 0.0
        x[2, 5] = math.nan
        x[3, 130] = math.inf
        x[3, 300] = -math.inf
        scales, out = torch.empty(4, 4), torch.empty(4, 512, dtype=E4M3)
        make("per_token_group_quant_fp8", 2, dtype, group="128")(x, scales, 1e-10, math.inf, out)
        interpreted_exactly((out, scales), group_reference(x, 128))
        rows = (torch.randn(3, 9000) * 0.01).to(torch_dtype)
        rows[2, 8999] = 1e4
        scales, out = torch.empty(3, 1), torch.empty(3, 9000, dtype=E4M3)
        make("per_token_group_quant_fp8", 2, dtype, group="row")(rows, scales, 1e-10, math.inf, out)
        interpreted_exactly((out, scales), group_reference(rows, 9000))
        make("per_token_group_quant_fp8", 2, dtype, group="row")(rows, scales, 1e-10, 100.0, out)
        interpreted_exactly((out, scales), group_reference(rows, 9000, ub=100.0))
        unbounded = group_reference(rows, 9000)[1]
        assert out[2, 8999].float() == 448  # 1e4 saturates under a bound of 100
        assert scales[2, 0] < unbounded[2, 0]
        assert scales[0, 0] == unbounded[0, 0]


def interpreted_exactly(result, reference):
    """Scales as the reference's, exactly; values within the interpreter's conversion
    to float8_e4m3fn (Triton 3.9), which drops the carry where rounding reaches the
    next power of two (-126.7 gives -64, not -128), rounds ties away from zero (42 gives
    44, not 40), flushes some subnormals and makes NaN 384: normal values of the same
    sign as the reference's, from half its magnitude to one unit (of e4m3fn's 3
    mantissa bits) more, most of them equal, none past 448. The GPU suite compares
    the compiled kernels' conversions exactly, NaN included."""
    (values, scales), (want_values, want_scales) = result, reference
    torch.testing.assert_close(scales, want_scales, rtol=0, atol=0, equal_nan=True)
    got, want = values.float(), want_values.float()
    checked = want.isfinite() & (want.abs() >= 2**-6)  # normal e4m3fn values
    ratio = got / want
    near = (ratio >= 0.5) & (ratio <= 1.125)
    assert near[checked].all(), (got[checked & ~near], want[checked & ~near])
    assert (got[checked] == want[checked]).float().mean() > 0.8
    assert got[want.isfinite()].abs().max() <= 448
