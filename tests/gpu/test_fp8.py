"""FP8 quantization (scaled_fp8_quant, per_token_group_quant_fp8) on the GPU: values
within half a unit of e4m3fn once dequantized (a bound from the format, not a
tolerance), torch's answers exactly at prefill sizes, special values as torch's cast
makes them, the scales' layouts, and CUDA-graph capture."""

import math

import pytest
import torch

E4M3 = torch.float8_e4m3fn
FLOATS = [torch.float16, torch.bfloat16, torch.float32]
MODES = ("per tensor, static", "per tensor, dynamic", "per token", "groups of 128")


def _quantize(nt, x, mode):
    """(values, scales broadcast to x's shape) of one way to quantize x."""
    if mode == "groups of 128":
        values, scales = nt.per_token_group_quant_fp8(x, 128)
        return values, scales.repeat_interleave(128, -1)
    if mode == "per token":
        values, scales = nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
        return values, scales.view(*x.shape[:-1], 1)
    scale = torch.tensor([x.abs().amax().float() / 400], device="cuda")
    values, scale = nt.scaled_fp8_quant(x, scale if mode.endswith("static") else None)
    return values, scale


def half_unit(y):
    """Half of e4m3fn's unit at |y| (3 mantissa bits; subnormals below 2^-6, a unit of
    2^-9 there): how far round-to-nearest may move a value within range."""
    y = y.abs()
    exponent = torch.floor(torch.log2(y.clamp(min=2**-6)))
    return torch.where(y >= 2**-6, torch.exp2(exponent - 4), torch.full_like(y, 2**-10))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("magnitude", [1e-3, 1.0, 300.0])
def test_dequantized_values_are_within_half_a_unit(nt, mode, dtype, magnitude):
    x = (torch.randn(37, 4, 256, device="cuda") * magnitude).to(dtype)
    x[3, 1] *= 50  # a row with an outlier: its scale is wider than its neighbours'
    values, scales = _quantize(nt, x, mode)
    assert values.dtype == E4M3
    assert values.shape == x.shape
    exact = x.float()
    y = exact / scales
    assert y.abs().max() <= 448 * (1 + 2**-20)  # the scale maps the largest within range
    # Rounding y to e4m3fn moves it by at most half a unit; dividing in fp32 first, by
    # one rounding of y (2^-24 of it).
    bound = (half_unit(y) + y.abs() * 2**-23) * scales
    error = (values.float() * scales - exact).abs()
    assert (error <= bound).all(), (error - bound).max()


@pytest.mark.parametrize("dtype", FLOATS)
def test_torchs_answers_exactly_at_prefill_sizes(nt, dtype):
    from ntops_prebuilt._fp8_reference import group_reference, scaled_reference

    x = torch.randn(2048, 4096, device="cuda").to(dtype) * 3
    for got, want in [
        (nt.per_token_group_quant_fp8(x, 128), group_reference(x, 128)),
        (nt.per_token_group_quant_fp8(x, 4096), group_reference(x, 4096)),
        (nt.scaled_fp8_quant(x), scaled_reference(x)),
        (nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True), scaled_reference(x, None, True)),
        # every token's largest magnitude past the bound: each saturates
        (
            nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True, scale_ub=5.0),
            scaled_reference(x, None, True, 5.0),
        ),
    ]:
        for one, theirs in zip(got, want, strict=True):
            assert one.dtype == theirs.dtype
            assert one.shape == theirs.shape
            torch.testing.assert_close(one, theirs, rtol=0, atol=0)


def test_special_values_as_torchs_cast_makes_them(nt):
    specials = [math.nan, math.inf, -math.inf, 1000.0, -1000.0, 0.0, -0.0, 224.0, 1e-6]
    x = torch.tensor(specials, device="cuda")
    values, _ = nt.scaled_fp8_quant(x, torch.tensor([0.5], device="cuda"))
    got = values.float().tolist()
    assert all(math.isnan(v) for v in got[:3])  # NaN, and +-inf: e4m3fn has no infinity
    assert got[3:] == [448.0, -448.0, 0.0, 0.0, 448.0, 0.0]  # saturated, zeros, underflow
    assert math.copysign(1.0, got[6]) == -1.0  # -0 keeps its sign
    # A group holding NaN (or an infinity) has a NaN (infinite) scale, as torch's amax.
    rows = torch.randn(3, 256, device="cuda")
    rows[0, 7], rows[1, 200] = math.nan, math.inf
    values, scales = nt.per_token_group_quant_fp8(rows, 128)
    assert scales[0, 0].isnan()
    assert values[0, :128].float().isnan().all()
    assert scales[1, 1].isinf()
    assert values[1, 200].float().isnan()
    assert values[1, 128:].float().isnan().sum() == 1  # the rest: finite / inf = 0
    assert scales[2].isfinite().all()


def test_zero_rows_quantize_to_zeros(nt):
    zeros = torch.zeros(4, 256, device="cuda", dtype=torch.bfloat16)
    values, scales = nt.per_token_group_quant_fp8(zeros, 128, eps=1e-10)
    assert (values.float() == 0).all()
    assert torch.equal(scales, torch.full_like(scales, 1e-10 / 448))
    values, scale = nt.scaled_fp8_quant(zeros)
    assert (values.float() == 0).all()
    assert scale.item() == pytest.approx(1 / 512 / 448)


def test_scales_layouts(nt):
    x = torch.randn(2, 3, 384, device="cuda", dtype=torch.float16)
    values, scales = nt.per_token_group_quant_fp8(x, 128)
    assert values.shape == (2, 3, 384)
    assert scales.shape == (2, 3, 3)
    assert scales.is_contiguous()
    flat = x.view(6, 384)
    _, column = nt.per_token_group_quant_fp8(flat, 128, column_major_scales=True)
    assert column.shape == (6, 3)
    assert column.stride() == (1, 6)
    torch.testing.assert_close(column, scales.view(6, 3), rtol=0, atol=0)
    _, per_token = nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
    assert per_token.shape == (6, 1)
    # Views: strided rows, and a transposed input (copied into rows).
    wide = torch.randn(5, 1024, device="cuda")[:, ::2]
    got = nt.per_token_group_quant_fp8(wide, 128)
    want = nt.per_token_group_quant_fp8(wide.contiguous(), 128)
    for one, theirs in zip(got, want, strict=True):
        torch.testing.assert_close(one, theirs, rtol=0, atol=0)


def test_every_mode_replays_in_a_cuda_graph(nt):
    x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    static = torch.tensor([0.01], device="cuda")
    calls = [
        lambda: nt.scaled_fp8_quant(x, static),
        lambda: nt.scaled_fp8_quant(x),
        lambda: nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True),
        lambda: nt.per_token_group_quant_fp8(x, 128),
    ]
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = [call() for call in calls]
    x.copy_(torch.randn_like(x) * 7)
    graph.replay()
    for call, results in zip(calls, captured, strict=True):
        for one, theirs in zip(results, call(), strict=True):
            torch.testing.assert_close(one, theirs, rtol=0, atol=0)


@pytest.mark.parametrize("group_size", [None, 128])
@pytest.mark.parametrize("dtype", FLOATS)
def test_fused_forms_are_within_half_a_unit_of_their_math(nt, group_size, dtype):
    """rms_norm_quant_fp8 and silu_mul_quant_fp8 against the fp32 values they quantize
    (the sums of squares and exp differ from torch's in the last bits: 2^-20 of a value
    on top of half a unit)."""
    x = (torch.randn(300, 1024, device="cuda") * 2).to(dtype)
    weight = torch.rand(1024, device="cuda").to(dtype) + 0.5
    other = torch.randn(300, 1024, device="cuda").to(dtype)
    norm = torch.nn.functional.rms_norm(x.float(), (1024,), weight.float(), 1e-6)
    gate = torch.nn.functional.silu(x.float()) * other.float()
    for (values, scales), exact in [
        (nt.rms_norm_quant_fp8(x, weight, 1e-6, group_size), norm),
        (nt.silu_mul_quant_fp8(x, other, group_size), gate),
    ]:
        width = group_size or 1024
        assert scales.shape == (300, 1024 // width)
        scales = scales.repeat_interleave(width, -1)
        bound = (half_unit(exact / scales) + (exact / scales).abs() * 2**-20) * scales
        assert ((values.float() * scales - exact).abs() <= bound).all()
        largest = exact.abs().view(300, -1, width).amax(-1).repeat_interleave(width, -1)
        torch.testing.assert_close(
            scales[:, ::width], (largest / 448)[:, ::width], rtol=1e-5, atol=0
        )
