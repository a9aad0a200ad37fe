"""conv2d (kernels/conv2d.py): compared with a float64 convolution by the norm of the
error, as the products are (tests/ops/matmul.py), and elementwise within fp32
accumulation's bound (TF32's for fp32, where torch's convolutions use it) in the fuzz.
The interpreted check runs the runtime wrapper (aot/runtime/_conv2d.py) on the CPU, its
kernel under Triton's interpreter (tests/ops/_runtime.py), against torch's CPU kernel."""

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import strided, values
from tests.ops.max_pool import five

F = torch.nn.functional
GROUPS = {
    "conv2d": {
        "conv2d-fp32_precision=tf32": {"fp32_precision": "tf32"},
        "conv2d-fp32_precision=ieee": {"fp32_precision": "ieee"},
    }
}


def num_tensors(variant):
    return 4  # output, input, weight, bias


def run(nt, variant, spec, dtype, bucket):
    """Two groups of a padded, strided and dilated convolution with a bias, of an input
    whose dims lie apart in memory; fp32 in the variant's precision."""
    x = strided((2, 6, 19, 23), dtype, unit=None, aligned=spec.aligned, wide=spec.width == 64)
    weight, bias = values((8, 3, 3, 2), dtype), values((8,), dtype)
    options = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}
    previous = torch.get_float32_matmul_precision()
    ieee = variant["switches"]["fp32_precision"] == "ieee"
    torch.set_float32_matmul_precision("highest" if ieee else "high")
    try:
        result = nt.conv2d(x, weight, bias, **options)
    finally:
        torch.set_float32_matmul_precision(previous)
    return result, F.conv2d(x.double(), weight.double(), bias.double(), **options)


def check(result, reference, variant, dtype):
    """The error's norm relative to the result's: fp32 accumulation (TF32 inputs unless
    the variant is IEEE's) in the dtype's rounding."""
    assert (result.dtype, result.shape) == (dtype, reference.shape)
    error = ((result.double() - reference).norm() / reference.norm()).item()
    ieee = dtype == torch.float32 and variant["switches"]["fp32_precision"] == "ieee"
    limit = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-5 if ieee else 2e-3)
    assert error < limit, f"{variant['id']}: relative error {error:.3g}, limit {limit:g}"


def calls(name, dtype):
    """Channels-last input and weight (the output follows, as torch's). (Not padding
    "same" or "valid": a traced call reaches the op with the padding as numbers, which
    the function works out; the interpreted check covers them.)"""
    shape = (2, 3, 9, 11)
    last = torch.empty(shape, device="meta", memory_format=torch.channels_last).stride()
    weights = torch.empty((4, 3, 3, 3), device="meta", memory_format=torch.channels_last)
    return [
        Call(
            "conv2d of a channels-last input",
            name,
            lambda make: ((make(shape, dtype, strides=last), make((4, 3, 3, 3), dtype)), {}),
        ),
        Call(
            "conv2d of a channels-last weight",
            name,
            lambda make: (
                (make(shape, dtype), make((4, 3, 3, 3), dtype, strides=weights.stride())),
                {"padding": 1},
            ),
        ),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, F.conv2d, FLOATS, atol=_atol)


def _draw(d, op):
    """Inputs of any layout with or without a batch dim, 1-3 groups, windows of 1-4 a
    dim, a bias or not, strides, paddings (numbers, "valid", "same"), dilations; now
    and then a window larger than the padded input (refused)."""
    from tests.gpu.fuzz_inputs import FLOATS

    dtype = d.principal(FLOATS)
    groups = d.pick((1, 1, 2, 3))
    per_group, kernels = d.rng.randint(1, 5), groups * d.rng.randint(1, 6)
    batch = (d.rng.randint(0, 3),) if d.chance(0.8) else ()
    x = d.tensor((*batch, groups * per_group, d.rng.randint(1, 24), d.rng.randint(1, 24)), dtype)
    window = (d.rng.randint(1, 4), d.rng.randint(1, 4))
    weight = d.tensor((kernels, per_group, *window), dtype, specials="finite-range")
    kwargs = {"groups": groups} if groups > 1 else {}
    if d.chance(0.5):
        kwargs["bias"] = d.tensor((kernels,), dtype, specials="finite-range")
    if d.chance(0.4):
        kwargs["dilation"] = [d.rng.randint(1, 3) for _ in range(2)]
    kind = d.pick(("none", "numbers", "numbers", "valid", "same"))
    if kind == "numbers":
        kwargs["padding"] = [d.rng.randint(0, 3) for _ in range(2)]
    elif kind != "none":
        kwargs["padding"] = kind
    if kind != "same" and d.chance(0.5):
        kwargs["stride"] = [d.rng.randint(1, 3) for _ in range(2)]
    return (x, weight), kwargs


def _atol(args, kwargs, precision):
    """|ours - torch| <= atol + rtol |torch|: with fp32 accumulation over the window's
    K terms each side errs by at most K u (|x| * |w|, convolved), u = 2^-24; TF32
    inputs add up to 2^-8 of it more, for fp32 always: torch's convolutions take TF32 by
    default (torch.backends.cudnn.allow_tf32), ours where the matmul precision is not
    "highest"."""
    x, weight = args
    if not x.dtype.is_floating_point:
        return 0  # compared exactly (a dtype the kernel is not built for: both refuse)
    bias = kwargs.get("bias")
    options = {
        key: kwargs[key] for key in ("stride", "padding", "dilation", "groups") if key in kwargs
    }
    k = weight[0].numel()
    per_term = 2 * k * 2**-24 + (2**-8 if x.dtype == torch.float32 else 0)
    magnitude = F.conv2d(x.abs().double(), weight.abs().double(), None, **options)
    if bias is not None:
        magnitude = magnitude + bias.abs().double().view(-1, 1, 1)
    return 1.5 * per_term * magnitude + torch.finfo(x.dtype).smallest_normal


def close(got, want, atol=1e-4):
    """fp32 against torch's fp32 on the CPU, at the error a few hundred terms in
    another order make; the layout as torch's."""
    assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=atol)


def interpreted(make):
    """The wrapper and its kernel against torch on the CPU: windows of 1x1 to 5x3,
    strides, paddings (numbers, "valid", and "same" of odd and even spans), dilations,
    groups (depthwise too), a bias or none, inputs without a batch dim, channels-last
    and sliced views, a reduction of several block_k steps, both fp32 precisions, fp16;
    refusals in torch's words."""
    from tests.ops._runtime import load

    nt = load(five(make), "_conv2d", GROUPS)
    x = torch.randn(2, 6, 13, 11)
    for shape, options in (
        ((4, 6, 3, 3), {}),
        ((5, 6, 1, 1), {"stride": 2}),
        ((4, 3, 3, 2), {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}),
        ((6, 1, 3, 3), {"padding": 1, "groups": 6}),  # depthwise
        ((4, 6, 5, 3), {"padding": "same", "dilation": (1, 2)}),
        ((4, 6, 2, 4), {"padding": "same"}),  # one more on the right
        ((4, 6, 3, 3), {"padding": "valid", "stride": 3}),
    ):
        weight, bias = torch.randn(shape), torch.randn(shape[0])
        close(nt.conv2d(x, weight, bias, **options), F.conv2d(x, weight, bias, **options))
        close(nt.conv2d(x[1], weight, **options), F.conv2d(x[1], weight, **options))
    weight = torch.randn(4, 6, 3, 3)
    last = x.contiguous(memory_format=torch.channels_last)
    close(nt.conv2d(last, weight, padding=1), F.conv2d(last, weight, padding=1))
    view = x[:, :, 1::2, 2:]
    close(nt.conv2d(view, weight), F.conv2d(view, weight))
    deep = torch.randn(1, 40, 9, 9)  # 360 terms: 12 steps of 32
    wide = torch.randn(3, 40, 3, 3)
    close(nt.conv2d(deep, wide, padding=1), F.conv2d(deep, wide, padding=1), atol=2e-4)
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")  # the TF32 kernel (here fp32's numpy)
        close(nt.conv2d(x, weight, padding=1), F.conv2d(x, weight, padding=1))
    finally:
        torch.set_float32_matmul_precision(previous)
    # fp16 only: Triton 3.9's interpreter multiplies bf16 tiles wrongly (`tl.dot` of two
    # 16x16 bf16 tiles came out 2.6e10 off), so bf16 is the GPU suite's.
    half_x, half_w, half_b = (t.half() for t in (x, weight, torch.randn(4)))
    want = F.conv2d(half_x.float(), half_w.float(), half_b.float(), padding=1).half()
    got = nt.conv2d(half_x, half_w, half_b, padding=1)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    check_refusals(nt, x)


def check_refusals(nt, x):
    for weight, options in (
        (torch.randn(4, 5, 3, 3), {}),  # 5 channels, the input's 6
        (torch.randn(4, 6, 3, 3), {"groups": 4}),
        (torch.randn(4, 6, 3, 3), {"padding": "same", "stride": 2}),
        (torch.randn(4, 6, 3, 3), {"padding": "full"}),
        (torch.randn(4, 6, 30, 3), {}),  # larger than the input
        (torch.randn(4, 6, 3, 3), {"stride": 0}),
    ):
        with pytest.raises(RuntimeError):
            F.conv2d(x, weight, **options)
        with pytest.raises(RuntimeError, match="conv2d"):
            nt.conv2d(x, weight, **options)
    with pytest.raises(RuntimeError, match="conv2d"):
        nt.conv2d(x, torch.randn(4, 6, 3, 3).double())
