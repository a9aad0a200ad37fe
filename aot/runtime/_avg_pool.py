"""avg_pool2d, adaptive_avg_pool2d, lp_pool1d, lp_pool2d and lp_pool3d, one kernel
(kernels/avg_pool.py: every pool a 3-d pool, _windows.py the views and the window).
lp_pool's infinite norms are torch's: a max pool of |x| (kernels/max_pool.py)."""

import functools
import math

import torch

from . import _C, _max_pool
from . import _checks as check
from . import _windows as windows
from ._library import compiling, fake, traced

F = torch.nn.functional
_launch = _C.launch
_AVG_POOL = check.groups("avg_pool")[()]
# What the kernel divides a window's sum by (kernels/avg_pool.py's `mode`).
_PADDED, _INSIDE, _ADAPTIVE = 0, 1, 2
_LP = {"lp_pool1d": 1, "lp_pool2d": 2, "lp_pool3d": 3}


def _pool(input, spatial, counts, scalars, mode=_PADDED, divisor=0, norm=0.0):
    # torch's avg_pool3d (lp_pool3d's) writes contiguous outputs whatever the input's
    # format (its meta and CPU kernels; the 2-d pools follow channels-last inputs).
    output = windows.empty(input, spatial, counts, formats=spatial < 3)
    volumes = (windows.volume(output, spatial), windows.volume(input, spatial))
    _launch(_AVG_POOL, *volumes, *scalars, mode, divisor, norm)
    return output


def _call(op, compute, input, arguments):
    """`compute(input, *arguments)`, or while Dynamo traces or on a tensor subclass the
    op (its arguments read as torch reads them: `arguments`)."""
    if compiling():
        return traced(op)(input, *arguments)
    try:
        return compute(input, *arguments)
    except _C.SubclassError:
        return traced(op)(input, *arguments)


def avg_pool2d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
    divisor_override=None,
):  # fmt: skip
    """torch.nn.functional.avg_pool2d: each window's mean, over the window clipped to
    the padded input (count_include_pad) or to the input, or divided by
    divisor_override."""
    op = "avg_pool2d"
    kernel = windows.sizes(op, "kernel_size", kernel_size, 2)
    arguments = (
        list(kernel),
        list(windows.sizes(op, "stride", stride, 2, default=kernel)),
        list(windows.sizes(op, "padding", padding, 2)),
        bool(ceil_mode),
        bool(count_include_pad),
        divisor_override,
    )
    return _call(op, _average, input, arguments)


def _average(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
    divisor=None,
):  # fmt: skip
    op = "avg_pool2d"
    windows.checked(op, input, 2)
    if divisor is not None and divisor == 0:
        raise RuntimeError(f"{op}: divisor must be not zero")
    kernel = windows.sizes(op, "kernel_size", kernel_size, 2)
    stride = windows.sizes(op, "stride", stride, 2, default=kernel)
    padding = windows.sizes(op, "padding", padding, 2)
    counts, scalars = windows.fixed(op, input, 2, kernel, stride, padding, (1, 1), ceil_mode)
    mode = _PADDED if count_include_pad else _INSIDE
    return _pool(input, 2, counts, scalars, mode, divisor or 0)


def adaptive_avg_pool2d(input, output_size):
    """torch.nn.functional.adaptive_avg_pool2d: output o of n along a dim of L the mean
    of [floor(o L / n), ceil((o + 1) L / n))."""
    counts = windows.requested("adaptive_avg_pool2d", input, 2, output_size)
    return _call("adaptive_avg_pool2d", _adaptive, input, (counts,))


@fake("adaptive_avg_pool2d")
def _adaptive_fake(input, output_size):
    """torch's answer, of output_size as the op's schema passes it (a list of one int
    for both dims among them)."""
    return F.adaptive_avg_pool2d(
        input, windows.requested("adaptive_avg_pool2d", input, 2, output_size)
    )


def _adaptive(input, output_size):
    op = "adaptive_avg_pool2d"
    windows.checked(op, input, 2)
    counts = windows.requested(op, input, 2, output_size)
    return _pool(input, 2, counts, windows.adaptive(input, 2, counts), _ADAPTIVE)


def _lp_function(op):
    spatial = _LP[op]

    def pool(input, norm_type, kernel_size, stride=None, ceil_mode=False):
        kernel = windows.sizes(op, "kernel_size", kernel_size, spatial)
        stride = windows.sizes(op, "stride", stride, spatial, default=kernel)
        # lp_pool1d's op takes ints, as torch's lp_pool1d (its fake) does.
        kernel, stride = (kernel[0], stride[0]) if spatial == 1 else (list(kernel), list(stride))
        arguments = (float(norm_type), kernel, stride, bool(ceil_mode))
        return _call(op, functools.partial(_power, op), input, arguments)

    if spatial > 1:  # lp_pool1d's schema takes ints, as torch's lp_pool1d does
        fake(op)(functools.partial(_power_fake, op))
    pool.__name__ = pool.__qualname__ = op
    pool.__doc__ = (
        f"torch.nn.functional.{op}: (sum of x ** p over each window) ** (1 / p), as torch "
        "computes it: avg_pool of x ** p (ceil_mode's last windows divided by what they "
        "hold) times the window's size; p = inf: the largest |x|, -inf: the least."
    )
    return pool


def _power_fake(op, input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """torch's answer, of a kernel size and stride as the op's schema passes them (a
    list of one int for every dim among them; torch's lp_pool2d unpacks two)."""
    spatial = _LP[op]
    kernel = windows.sizes(op, "kernel_size", kernel_size, spatial)
    stride = windows.sizes(op, "stride", stride, spatial, default=kernel)
    return getattr(F, op)(input, norm_type, list(kernel), list(stride), ceil_mode)


def _power(op, input, norm_type, kernel_size, stride=None, ceil_mode=False):
    spatial = _LP[op]
    windows.checked(op, input, spatial)
    kernel = windows.sizes(op, "kernel_size", kernel_size, spatial)
    stride = windows.sizes(op, "stride", stride, spatial, default=kernel)
    if math.isinf(norm_type):  # torch: max_pool of |x|, or -max_pool of -|x|
        pool, magnitude = f"max_pool{spatial}d", input.abs()
        if norm_type < 0:
            magnitude = magnitude.neg()
        values, _ = _max_pool._fixed(pool, magnitude, kernel, stride, 0, 1, ceil_mode, False)
        return values if norm_type > 0 else values.neg()
    if norm_type == 0:
        raise ZeroDivisionError("float division by zero")  # torch's 1.0 / norm_type
    zeros, ones = (0,) * spatial, (1,) * spatial
    counts, scalars = windows.fixed(op, input, spatial, kernel, stride, zeros, ones, ceil_mode)
    return _pool(input, spatial, counts, scalars, _PADDED, 0, norm_type)


lp_pool1d = _lp_function("lp_pool1d")
lp_pool2d = _lp_function("lp_pool2d")
lp_pool3d = _lp_function("lp_pool3d")
