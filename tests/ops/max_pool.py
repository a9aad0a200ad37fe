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


def padded(name):
    """F.<name> where torch takes the padding; past half the kernel, as upstream's
    pools compute it (torch refuses it): the input padded with -inf explicitly (on the
    right to torch's output size, cropped where that needs less, as upstream's
    max_pool3d pads) and pooled without padding. Indices are mapped back to the input's
    plane, -1 inside the padding; where the maximum is -inf, the first element inside
    the input (a pool of a mask: 0 inside, -1 in the padding), as torch's own give."""
    pool, spatial = getattr(F, name), int(name[-2])

    def reference(
        input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
        return_indices=False,
    ):  # fmt: skip
        kernel = _each(kernel_size, spatial)
        given = stride is not None and (isinstance(stride, int) or len(stride))
        strides = _each(stride, spatial) if given else kernel
        pads, dilations = _each(padding, spatial), _each(dilation, spatial)
        if all(0 <= pad <= size // 2 for pad, size in zip(pads, kernel, strict=True)):
            options = (kernel_size, stride, padding, dilation, ceil_mode, return_indices)
            return pool(input, *options)
        lengths = input.shape[input.ndim - spatial :]
        windows = list(zip(lengths, kernel, strides, pads, dilations, strict=True))
        rights = [_right(name, *window, ceil_mode) for window in windows]
        ends = zip(pads[::-1], rights[::-1], strict=True)  # F.pad's order: the last dim first
        widths = [width for pad, right in ends for width in (pad, right)]

        def pooled(x, fill):
            wide = F.pad(x, widths, value=fill)
            found = pool(wide, kernel, strides, 0, dilations, False, True)
            return (*found, wide.shape[wide.ndim - spatial :])

        values, at, plane = pooled(input, -math.inf)
        if not return_indices:
            return values
        _, first, _ = pooled(torch.zeros_like(input), -1.0)
        at = torch.where(values == -math.inf, first, at)
        index, inside = torch.zeros_like(at), torch.ones_like(at, dtype=torch.bool)
        coordinates = torch.unravel_index(at, plane)
        for coordinate, pad, length in zip(coordinates, pads, lengths, strict=True):
            coordinate = coordinate - pad
            inside &= (coordinate >= 0) & (coordinate < length)
            index = index * length + coordinate
        return values, torch.where(inside, index, -1)

    return reference


def _each(value, spatial):
    """A pool's int or list of ints as `spatial` ints."""
    value = [value] if isinstance(value, int) else list(value)
    return value * spatial if len(value) == 1 else value


def _right(name, length, kernel, stride, pad, dilation, ceil_mode):
    """The right padding that makes a pool without padding give torch's output size
    (pooling_output_shape, which holds for any padding): negative to crop."""
    if pad < 0:
        raise RuntimeError(f"{name}: pad should be at least zero")
    reach = dilation * (kernel - 1) + 1
    count = (length + 2 * pad - reach + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (count - 1) * stride >= length + pad:
        count -= 1
    if count < 1:
        raise RuntimeError(f"{name}: output size is too small")
    return (count - 1) * stride + reach - length - pad


def fuzz_specs():
    """The four functions' (one kernel serves them); the fixed pools' paddings past
    half the kernel against `padded`."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    references = {name: padded(name) for name in FUNCTIONS[:3]}
    return {
        name: Spec(
            _draw,
            references.get(name, getattr(F, name)),
            FLOATS,
            kernel="max_pool",
            names=("max_pool",),
        )
        for name in FUNCTIONS
    }


def _draw(d, op):
    """An input of any layout (specials: NaN, infinities) with or without a batch dim;
    a window of 1-4 elements a dim, strides, paddings up to half of it (now and then
    more: taken, as upstream's pools take them), dilations, ceil_mode, return_indices;
    adaptive output sizes below, at and above the input's."""
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
    check_past_half(nt, x, cube)
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


def check_past_half(nt, x, cube):
    """Paddings past half the kernel, which torch refuses and upstream's pools take
    (its test of max_pool1d: kernel 2, stride 2, padding 2): against `padded`, on
    inputs with NaNs, ties and -inf beside the padding; a window wholly inside the
    padding is -inf at index -1."""
    line = x.flatten(2)[:, :, :37].contiguous()
    line[0, 1, :3] = -math.inf
    for options in (
        {"kernel_size": 2, "stride": 2, "padding": 2},
        {"kernel_size": 2, "stride": 2, "padding": 2, "ceil_mode": True},
        {"kernel_size": 3, "stride": 2, "padding": 3, "dilation": 2, "ceil_mode": True},
        {"kernel_size": 1, "padding": 1},
    ):
        check_pool(nt.max_pool1d, padded("max_pool1d"), line, options)
        check_pool(nt.max_pool1d, padded("max_pool1d"), line[1], options)
    values, indices = nt.max_pool1d(line, 2, 2, padding=2, return_indices=True)
    assert values[:, :, 0].eq(-math.inf).all()
    assert indices[:, :, 0].eq(-1).all()
    for options in (
        {"kernel_size": (2, 3), "stride": (1, 2), "padding": (2, 3), "ceil_mode": True},
        {"kernel_size": 3, "stride": 3, "padding": (1, 2), "dilation": (2, 1)},
    ):
        check_pool(nt.max_pool2d, padded("max_pool2d"), x, options)
    options = {"kernel_size": (2, 3, 2), "stride": 2, "padding": (2, 1, 2), "ceil_mode": True}
    check_pool(nt.max_pool3d, padded("max_pool3d"), cube, options)


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
        {"kernel_size": 3, "padding": -1},  # (more than half the window: taken)
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
