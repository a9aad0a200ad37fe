"""max_pool1d, max_pool2d, max_pool3d and adaptive_max_pool2d, one kernel
(kernels/max_pool.py: every pool a 3-d pool, _windows.py the views and the window).

Each has two forms of result, the values and with return_indices (values, indices);
its torch.library op returns both always (its `implementation`), the indices empty
without return_indices, and the function takes what torch's would return from it.

The fixed pools take any padding, as upstream's do, where torch refuses one over half
the kernel: the padding is -inf, so a window wholly inside it gives -inf, and index -1
(no element of the input is its maximum); the output's size is torch's formula, which
holds for any padding (_windows.outputs)."""

import functools

import torch

from . import _C
from . import _checks as check
from . import _windows as windows
from ._library import compiling, fake, implementation, traced

F = torch.nn.functional
_launch = _C.launch
_MAX_POOL = check.groups("max_pool")[()]
_FIXED = {"max_pool1d": 1, "max_pool2d": 2, "max_pool3d": 3}


def _pool(input, spatial, counts, scalars, adaptive, return_indices):
    """(values, indices) of a max pool of `input` over windows `scalars` (the kernel's
    12); without return_indices, indices are empty and the kernel writes none: it is
    given a stand-in of one element per plane, which it never writes (the launcher
    takes no output with a stride-0 dim)."""
    values, indices = _results(input, spatial, counts, return_indices)
    if return_indices:
        written = windows.volume(indices, spatial)
    else:
        planes = windows.volume(values, spatial).shape[:2]
        written = torch.empty((*planes, 1, 1, 1), dtype=torch.int64, device=input.device)
    volumes = (windows.volume(values, spatial), written, windows.volume(input, spatial))
    _launch(_MAX_POOL, *volumes, *scalars, adaptive, int(return_indices))
    return values, indices


def _results(input, spatial, counts, return_indices):
    """(values, indices) as the op returns them, unwritten: in torch's layouts, the
    indices empty without return_indices (the kernels' and the fakes')."""
    values = windows.empty(input, spatial, counts)
    if return_indices:
        return values, windows.empty(input, spatial, counts, torch.int64)
    return values, input.new_empty(0, dtype=torch.int64)


def _fixed(
    op, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
    return_indices=False,
):  # fmt: skip
    """max_pool1d/2d/3d: (values, indices)."""
    spatial = _FIXED[op]
    windows.checked(op, input, spatial)
    *window, ceil_mode, return_indices = _arguments(
        op, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )
    counts, scalars = windows.fixed(op, input, spatial, *window, ceil_mode, halved=False)
    return _pool(input, spatial, counts, scalars, 0, return_indices)


@implementation("adaptive_max_pool2d")
def _adaptive(input, output_size, return_indices=False):
    """adaptive_max_pool2d: (values, indices)."""
    op = "adaptive_max_pool2d"
    windows.checked(op, input, 2)
    counts = windows.requested(op, input, 2, output_size)
    return _pool(input, 2, counts, windows.adaptive(input, 2, counts), 1, return_indices)


def _arguments(op, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    """The fixed pools' arguments as lists of one int per spatial dim (their op's)."""
    spatial = _FIXED[op]
    kernel = windows.sizes(op, "kernel_size", kernel_size, spatial)
    return (
        list(kernel),
        list(windows.sizes(op, "stride", stride, spatial, default=kernel)),
        list(windows.sizes(op, "padding", padding, spatial)),
        list(windows.sizes(op, "dilation", dilation, spatial)),
        bool(ceil_mode),
        bool(return_indices),
    )


def _call(op, compute, input, arguments, return_indices):
    """`compute(input, *arguments)`, or while Dynamo traces or on a tensor subclass
    the op; its values, with its indices where asked for."""
    if compiling():
        values, indices = traced(op)(input, *arguments)
    else:
        try:
            values, indices = compute(input, *arguments)
        except _C.SubclassError:
            values, indices = traced(op)(input, *arguments)
    return (values, indices) if return_indices else values


def _fixed_function(op):
    def pool(
        input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
        return_indices=False,
    ):  # fmt: skip
        arguments = _arguments(
            op, kernel_size, stride, padding, dilation, ceil_mode, return_indices
        )
        return _call(op, functools.partial(_fixed, op), input, arguments, return_indices)

    pool.__name__ = pool.__qualname__ = op
    pool.__doc__ = (
        f"torch.nn.functional.{op}: the largest element of each window (NaN the largest), "
        "with return_indices also each one's index into its input plane (the first of "
        "equal maxima, the last NaN). Paddings over half the kernel are taken, as "
        "upstream ntops takes them: -inf, a window wholly inside them -inf at index -1."
    )
    implementation(op)(functools.partial(_fixed, op))
    fake(op)(functools.partial(_fixed_fake, op))
    return pool


def _fixed_fake(
    op, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
    return_indices=False,
):  # fmt: skip
    """The op's results as `_fixed` allocates them (its arguments as the schema passes
    them: lists of one int for every dim among them), with its checks; not torch's F,
    which refuses the paddings over half the kernel that the op takes."""
    spatial = _FIXED[op]
    windows.shaped(op, input, spatial)
    *window, ceil_mode, return_indices = _arguments(
        op, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )
    counts, _ = windows.fixed(op, input, spatial, *window, ceil_mode, halved=False)
    return _results(input, spatial, counts, return_indices)


max_pool1d = _fixed_function("max_pool1d")
max_pool2d = _fixed_function("max_pool2d")
max_pool3d = _fixed_function("max_pool3d")


@fake("adaptive_max_pool2d")
def _adaptive_fake(input, output_size, return_indices=False):
    counts = windows.requested("adaptive_max_pool2d", input, 2, output_size)
    values, indices = F.adaptive_max_pool2d(input, counts, return_indices=True)
    return values, indices if return_indices else indices.new_empty(0)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """torch.nn.functional.adaptive_max_pool2d: output o of n along a dim of L the
    largest of [floor(o L / n), ceil((o + 1) L / n)) (NaN the largest); with
    return_indices also its index into the input plane."""
    counts = windows.requested("adaptive_max_pool2d", input, 2, output_size)
    arguments = (counts, bool(return_indices))
    return _call("adaptive_max_pool2d", _adaptive, input, arguments, return_indices)
