"""The max pools (kernels/max_pool.py serves max_pool1d, max_pool2d, max_pool3d and
adaptive_max_pool2d): values compared with torch's exactly (a maximum is one of the
elements), indices too (the first of equal maxima, the last NaN). The interpreted check
runs the runtime wrappers (aot/runtime/_max_pool.py, and lp_pool's infinite norms,
which are max pools, in _avg_pool.py) on the CPU, their kernel under Triton's
interpreter (tests/ops/_runtime.py), against torch's CPU kernels."""

import math

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import strided

F = torch.nn.functional
GROUPS = {"max_pool": {"max_pool": {}}}
FUNCTIONS = ("max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool2d")


def num_tensors(variant):
    return 3  # output, indices, input


def run(nt, variant, spec, dtype, bucket):
    """max_pool2d with indices, padded, strided, in ceil_mode, of an input whose dims
    lie apart in memory."""
    x = strided((2, 3, 19, 23), dtype, unit=None, aligned=spec.aligned, wide=spec.width == 64)
    options = {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}
    return nt.max_pool2d(x, **options, return_indices=True), F.max_pool2d(
        x, **options, return_indices=True
    )


def check(result, reference, variant, dtype):
    exactly(result, reference)


def exactly(result, reference):
    """A tensor, or (values, indices), equal to torch's, NaN where it has NaN, in its
    layout."""
    pairs = (
        zip(result, reference, strict=True)
        if isinstance(reference, tuple)
        else [(result, reference)]
    )
    for got, want in pairs:
        assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def calls(name, dtype):
    """Channels-last inputs (outputs in torch's layout follow them)."""
    if name == "adaptive_max_pool2d":  # (None in output_size: the interpreted check's)
        last = torch.empty((2, 3, 9, 11), device="meta", memory_format=torch.channels_last)
        return [
            Call(
                f"{name} of a channels-last input",
                name,
                lambda make: (
                    (make((2, 3, 9, 11), dtype, strides=last.stride()), [7, 4]),
                    {"return_indices": True},
                ),
            )
        ]
    shapes = {"max_pool1d": (2, 3, 17), "max_pool2d": (2, 3, 9, 11), "max_pool3d": (2, 3, 5, 6, 7)}
    shape = shapes[name]
    last = {4: torch.channels_last, 5: torch.channels_last_3d}.get(len(shape))
    # A 1-d pool's: channels fastest, as a channels-last 2-d pool's input squeezed.
    strides = torch.empty(shape, device="meta", memory_format=last).stride() if last else (51, 1, 3)
    return [
        Call(
            f"{name} of a channels-last input",
            name,
            lambda make: ((make(shape, dtype, strides=strides), 2), {"return_indices": True}),
        )
    ]


def fuzz_specs():
    """The four functions' (one kernel serves them)."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    return {
        name: Spec(_draw, getattr(F, name), FLOATS, kernel="max_pool", names=("max_pool",))
        for name in FUNCTIONS
    }


def _draw(d, op):
    """An input of any layout (specials: NaN, infinities) with or without a batch dim;
    a window of 1-4 elements a dim, strides, paddings up to half of it (now and then
    more: refused), dilations, ceil_mode, return_indices; adaptive output sizes below,
    at and above the input's."""
    from tests.gpu.fuzz_inputs import FLOATS

    dtype = d.principal(FLOATS)
    spatial = 2 if op == "adaptive_max_pool2d" else int(op[-2])
    batch = (d.rng.randint(0, 3),) if d.chance(0.8) else ()
    shape = (*batch, d.rng.randint(1, 4), *(d.rng.randint(1, 24) for _ in range(spatial)))
    x = d.tensor(shape, dtype)
    kwargs = {"return_indices": True} if d.chance(0.5) else {}
    if op == "adaptive_max_pool2d":
        sizes = [d.rng.randint(1, 30) for _ in range(spatial)]
        return (x, sizes if d.chance(0.7) else sizes[0]), kwargs
    kernel = [d.rng.randint(1, 4) for _ in range(spatial)]
    if d.chance(0.5):
        kwargs["stride"] = [d.rng.randint(1, 3) for _ in range(spatial)]
    if d.chance(0.5):
        kwargs["padding"] = [d.rng.randint(0, size // 2 + d.chance(0.05)) for size in kernel]
    if d.chance(0.4):
        kwargs["dilation"] = [d.rng.randint(1, 3) for _ in range(spatial)]
    if d.chance(0.4):
        kwargs["ceil_mode"] = True
    return (x, kernel if d.chance(0.7) else kernel[0]), kwargs


def five(make):
    """`make` for these kernels, which take 5 dims whatever ndim a launcher asks for."""

    def build(op, ndim, dtype="fp32", **options):
        return make(op, 5, dtype, **options)

    build.registry = make.registry
    return build


def interpreted(make):
    """The wrappers and their kernel against torch on the CPU: windows holding NaNs (the
    last one's index), ties (the first's), only -inf (the first element inside the
    input) and the padding; every window option of the three fixed pools (padding,
    ceil_mode's last windows, dilation, strides, a window of several tiles), inputs
    without a batch dim, channels-last and sliced views, half types; adaptive windows
    that divide the input, that do not, and that outnumber it; lp_pool's infinite
    norms (max pools of |x|); refusals in torch's words."""
    from tests.ops._runtime import load

    # avg_pool's group too: lp_pool's module (whose infinite norms are max pools) names it.
    nt = load(five(make), "_max_pool", {**GROUPS, "avg_pool": {"avg_pool": {}}})
    x = torch.randint(-3, 4, (2, 3, 19, 23)).float()  # ties everywhere
    x[0, 0, 2, 3], x[0, 0, 2, 4], x[0, 1, 5, 5] = math.nan, math.nan, math.nan
    x[1, 2, :6, :6] = -math.inf
    x[1, 1, 7:10, 7:10] = math.inf
    for options in (
        {"kernel_size": 3},
        {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1},
        {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
        {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 0), "dilation": (2, 3)},
        {"kernel_size": (5, 4), "stride": 3, "padding": 2, "dilation": 2, "ceil_mode": True},
        {"kernel_size": 1, "stride": 1},
    ):
        check_pool(nt.max_pool2d, F.max_pool2d, x, options)
        check_pool(nt.max_pool2d, F.max_pool2d, x[1], options)  # no batch dim
        lengthwise = x.flatten(2)[:, :, :60]
        check_pool(nt.max_pool1d, F.max_pool1d, lengthwise, _first(options))
    cube = torch.randn(2, 2, 7, 8, 9)
    cube[0, 1, 3, 4, 5] = math.nan
    for options in (
        {"kernel_size": 2},
        {"kernel_size": (3, 2, 3), "stride": (2, 1, 2), "padding": 1, "ceil_mode": True},
        {"kernel_size": 3, "stride": 2, "dilation": (1, 2, 2)},
    ):
        check_pool(nt.max_pool3d, F.max_pool3d, cube, options)
        check_pool(nt.max_pool3d, F.max_pool3d, cube[0], options)
    check_layouts(nt, x)
    check_adaptive(nt, x)
    check_infinite_norms(x)
    check_refusals(nt, x)


def _first(options):
    """A 2-d pool's options for a 1-d pool: their first entries."""
    return {key: value[0] if isinstance(value, tuple) else value for key, value in options.items()}


def check_pool(ours, theirs, x, options):
    exactly(ours(x, **options), theirs(x, **options))
    got, want = ours(x, **options, return_indices=True), theirs(x, **options, return_indices=True)
    exactly(got, want)


def check_layouts(nt, x):
    """Channels-last and sliced inputs (the output follows torch's layout), half types."""
    last = x.contiguous(memory_format=torch.channels_last)
    options = {"kernel_size": 3, "stride": 2, "padding": 1}
    check_pool(nt.max_pool2d, F.max_pool2d, last, options)
    check_pool(nt.max_pool2d, F.max_pool2d, x[:, 1:, 2::2, ::3], options)
    for dtype in (torch.float16, torch.bfloat16):
        half = torch.randn(2, 3, 11, 13).to(dtype)
        check_pool(nt.max_pool2d, F.max_pool2d, half, options)
    cube = torch.randn(2, 3, 5, 6, 7).contiguous(memory_format=torch.channels_last_3d)
    check_pool(nt.max_pool3d, F.max_pool3d, cube, {"kernel_size": 2, "ceil_mode": True})


def check_adaptive(nt, x):
    """Adaptive windows: dividing the input, not, more outputs than inputs, one output
    (a window of 437 elements: 28 tiles), None for the input's size."""
    for size in ((5, 7), (19, 23), (4, 6), (1, 1), (20, 30), (7, None), 3):
        exactly(nt.adaptive_max_pool2d(x, size), F.adaptive_max_pool2d(x, size))
        got = nt.adaptive_max_pool2d(x, size, return_indices=True)
        exactly(got, F.adaptive_max_pool2d(x, size, return_indices=True))
    exactly(nt.adaptive_max_pool2d(x[0], (6, 5)), F.adaptive_max_pool2d(x[0], (6, 5)))


def check_infinite_norms(x):
    """lp_pool with p = inf is the largest |x| of each window, -inf the least: a max pool
    of |x| (of -|x|, negated), as torch computes them."""
    import ntops_prebuilt._avg_pool as avg

    for norm in (math.inf, -math.inf):
        got = avg.lp_pool2d(x, norm, 3, stride=2, ceil_mode=True)
        exactly(got, F.lp_pool2d(x, norm, 3, stride=2, ceil_mode=True))
        line = x.flatten(2)[:, :, :40]
        exactly(avg.lp_pool1d(line, norm, 4), F.lp_pool1d(line, norm, 4))


def check_refusals(nt, x):
    for options in (
        {"kernel_size": 3, "padding": 2},  # more than half the window
        {"kernel_size": 0},
        {"kernel_size": 3, "stride": 0},
        {"kernel_size": (2, 2, 2)},
        {"kernel_size": 30},  # no output
    ):
        with pytest.raises(RuntimeError):
            F.max_pool2d(x, **options)
        with pytest.raises(RuntimeError, match="max_pool2d"):
            nt.max_pool2d(x, **options)
    with pytest.raises(RuntimeError, match="max_pool2d"):
        nt.max_pool2d(x[0, 0, 0], 2)  # 1-dim
