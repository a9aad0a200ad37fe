"""The average pools (kernels/avg_pool.py serves avg_pool2d, adaptive_avg_pool2d,
lp_pool1d, lp_pool2d and lp_pool3d), compared with torch within the dtype's tolerance
(sums in another order). The interpreted check runs the runtime wrappers
(aot/runtime/_avg_pool.py) on the CPU, their kernel under Triton's interpreter
(tests/ops/_runtime.py), against torch's CPU kernels; lp_pool's infinite norms are max
pools (tests/ops/max_pool.py checks them)."""

import math

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import strided
from tests.ops.max_pool import five
from tests.tolerances import tolerance

F = torch.nn.functional
GROUPS = {"avg_pool": {"avg_pool": {}}}
FUNCTIONS = ("avg_pool2d", "adaptive_avg_pool2d", "lp_pool1d", "lp_pool2d", "lp_pool3d")


def num_tensors(variant):
    return 2  # output, input


def run(nt, variant, spec, dtype, bucket):
    """avg_pool2d without the padding in the count, in ceil_mode, of an input whose dims
    lie apart in memory."""
    x = strided((2, 3, 19, 23), dtype, unit=None, aligned=spec.aligned, wide=spec.width == 64)
    options = {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}
    options["count_include_pad"] = False
    return nt.avg_pool2d(x, **options), F.avg_pool2d(x, **options)


def calls(name, dtype):
    """Channels-last inputs (outputs in torch's layout follow them)."""
    if name == "adaptive_avg_pool2d":  # (None in output_size: the interpreted check's)
        last = torch.empty((2, 3, 9, 11), device="meta", memory_format=torch.channels_last)
        return [
            Call(
                f"{name} of a channels-last input",
                name,
                lambda make: ((make((2, 3, 9, 11), dtype, strides=last.stride()), [7, 4]), {}),
            )
        ]
    shapes = {"lp_pool1d": (2, 3, 17), "lp_pool2d": (2, 3, 9, 11), "lp_pool3d": (2, 3, 5, 6, 7)}
    shape = shapes.get(name, (2, 3, 9, 11))
    last = {4: torch.channels_last, 5: torch.channels_last_3d}.get(len(shape))
    strides = torch.empty(shape, device="meta", memory_format=last).stride() if last else (51, 1, 3)
    head = (2.0,) if name.startswith("lp") else ()
    return [
        Call(
            f"{name} of a channels-last input",
            name,
            lambda make: ((make(shape, dtype, strides=strides), *head, 3), {"stride": 2}),
        )
    ]


def fuzz_specs():
    """The five functions' (one kernel serves them)."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    return {
        name: Spec(_draw, getattr(F, name), FLOATS, kernel="avg_pool", names=("avg_pool",))
        for name in FUNCTIONS
    }


def _draw(d, op):
    """An input of any layout (specials: NaN, infinities) with or without a batch dim;
    a window of 1-4 elements a dim, strides, paddings up to half of it (now and then
    more: refused), ceil_mode, count_include_pad, divisor_override; lp_pool's norms
    1, 2, 3, 1.5 and infinities; adaptive output sizes below, at and above the input's."""
    from tests.gpu.fuzz_inputs import FLOATS

    dtype = d.principal(FLOATS)
    spatial = int(op[-2])
    batch = (d.rng.randint(0, 3),) if d.chance(0.8) else ()
    shape = (*batch, d.rng.randint(1, 4), *(d.rng.randint(1, 24) for _ in range(spatial)))
    x = d.tensor(shape, dtype)
    if op == "adaptive_avg_pool2d":
        sizes = [d.rng.randint(1, 30) for _ in range(spatial)]
        return (x, sizes if d.chance(0.7) else sizes[0]), {}
    kernel = [d.rng.randint(1, 4) for _ in range(spatial)]
    kwargs = {}
    if d.chance(0.5):
        kwargs["stride"] = [d.rng.randint(1, 3) for _ in range(spatial)]
    if d.chance(0.4):
        kwargs["ceil_mode"] = True
    window = kernel if d.chance(0.7) else kernel[0]
    if op.startswith("lp"):
        norm = d.pick((1.0, 2.0, 2.0, 3.0, 1.5, math.inf, -math.inf))
        return (x, norm, kernel[0] if spatial == 1 else window), kwargs
    if d.chance(0.5):
        kwargs["padding"] = [d.rng.randint(0, size // 2 + d.chance(0.05)) for size in kernel]
    if d.chance(0.3):
        kwargs["count_include_pad"] = False
    if d.chance(0.2):
        kwargs["divisor_override"] = d.pick((1, 3, 7, -2))
    return (x, window), kwargs


def close(got, want):
    assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(want.dtype))


def interpreted(make):
    """The wrappers and their kernel against torch on the CPU: every option of
    avg_pool2d (padding counted or not, ceil_mode's last windows, which count what they
    hold, divisor_override, windows of several tiles), inputs without a batch dim,
    channels-last and sliced views, half types; adaptive windows that divide the input,
    that do not and that outnumber it; lp_pool over 1, 2 and 3 dims with ceil_mode and
    p = 1, 2, 3 and 1.5 (NaN from negative elements, as torch); refusals in torch's
    words."""
    from tests.ops._runtime import load

    # max_pool's group too: the module imports _max_pool (lp_pool's infinite norms).
    nt = load(five(make), "_avg_pool", {**GROUPS, "max_pool": {"max_pool": {}}})
    x = torch.randn(2, 3, 19, 23)
    x[0, 0, 2, 3] = math.nan
    x[1, 1, 7, 7] = math.inf
    for options in (
        {"kernel_size": 3},
        {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1},
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
        {
            "kernel_size": 3,
            "stride": 2,
            "padding": 1,
            "ceil_mode": True,
            "count_include_pad": False,
        },
        {"kernel_size": (5, 4), "stride": 3, "padding": 2, "ceil_mode": True},
        {"kernel_size": (3, 2), "stride": (2, 1), "divisor_override": 4},
        {"kernel_size": 2, "padding": 1, "count_include_pad": False, "divisor_override": -3},
    ):
        close(nt.avg_pool2d(x, **options), F.avg_pool2d(x, **options))
        close(nt.avg_pool2d(x[1], **options), F.avg_pool2d(x[1], **options))
    last = x.contiguous(memory_format=torch.channels_last)
    options = {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}
    close(nt.avg_pool2d(last, **options), F.avg_pool2d(last, **options))
    close(nt.avg_pool2d(x[:, 1:, 2::2, ::3], 2), F.avg_pool2d(x[:, 1:, 2::2, ::3], 2))
    for dtype in (torch.float16, torch.bfloat16):
        half = torch.randn(2, 3, 11, 13).to(dtype)
        close(nt.avg_pool2d(half, **options), F.avg_pool2d(half.float(), **options).to(dtype))
    for size in ((5, 7), (19, 23), (4, 6), (1, 1), (20, 30), (None, 9), 3):
        close(nt.adaptive_avg_pool2d(x, size), F.adaptive_avg_pool2d(x, size))
    close(nt.adaptive_avg_pool2d(last, (6, 5)), F.adaptive_avg_pool2d(last, (6, 5)))
    close(nt.adaptive_avg_pool2d(x[0], (6, 5)), F.adaptive_avg_pool2d(x[0], (6, 5)))
    check_powers(nt)
    check_refusals(nt, x)


def check_powers(nt):
    """lp_pool as torch computes it: avg_pool of x ** p (ceil_mode's last windows
    divided by what they hold) times the window's size, ** (1 / p)."""
    x = torch.randn(2, 3, 13, 17)
    line, cube = x.flatten(2)[:, :, :50], torch.randn(2, 2, 7, 8, 9)
    for norm in (1.0, 2.0, 3.0, 1.5):
        for kernel, stride, ceil_mode in ((3, None, False), (4, 3, True), (2, 1, True)):
            options = {"stride": stride, "ceil_mode": ceil_mode}
            for name, input in (("lp_pool1d", line), ("lp_pool2d", x), ("lp_pool3d", cube)):
                close_powers(nt, name, input, norm, kernel, **options)
        close_powers(nt, "lp_pool2d", x[0], norm, (3, 2))
    half = torch.rand(2, 3, 13, 17).to(torch.float16) * 4
    want = F.lp_pool2d(half.float(), 2.0, 3).to(torch.float16)
    close(nt.lp_pool2d(half, 2.0, 3), want)


def close_powers(nt, name, x, norm, kernel, **options):
    """float32 lp_pool against torch's, compared as the sums they are the p-th root of:
    where a window's odd powers cancel, the root of a sum near zero moves with rounding
    by more than any relative tolerance (0.03% for one window of 2 * 3 * 7 * 8 * 9
    random ones, a CI run's), so each sum must be within float32's error of the sum of
    |x| ** p over the same window."""
    got = getattr(nt, name)(x, norm, kernel, **options)
    want = getattr(F, name)(x, norm, kernel, **options)
    assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
    bound = getattr(F, name)(x.abs(), norm, kernel, **options).double() ** norm
    sums = [got.double() ** norm, want.double() ** norm]
    near = 1e-5 * bound + 1e-30
    # NaN: a negative sum's root (or a negative element's fractional power), which
    # one side's rounding may give where the other's sum is 0 or barely above it
    one = sums[0].isnan() ^ sums[1].isnan()
    assert (sums[0].nan_to_num()[one] <= near[one]).all(), (name, norm, kernel, options)
    assert (sums[1].nan_to_num()[one] <= near[one]).all(), (name, norm, kernel, options)
    apart = ((sums[0] - sums[1]).abs() > near) & ~(sums[0].isnan() | sums[1].isnan())
    assert not apart.any(), (name, norm, kernel, options, got[apart], want[apart])


def check_refusals(nt, x):
    for function, options in (
        (F.avg_pool2d, {"kernel_size": 3, "padding": 2}),  # more than half the window
        (F.avg_pool2d, {"kernel_size": 3, "divisor_override": 0}),
        (F.avg_pool2d, {"kernel_size": (2, 2, 2)}),
        (F.adaptive_avg_pool2d, {"output_size": (2, 2, 2)}),
    ):
        with pytest.raises(RuntimeError):
            function(x, **options)
        with pytest.raises(RuntimeError, match=function.__name__):
            getattr(nt, function.__name__)(x, **options)
    for function in (F.lp_pool2d, nt.lp_pool2d):
        with pytest.raises(ZeroDivisionError):
            function(x, 0.0, 2)
