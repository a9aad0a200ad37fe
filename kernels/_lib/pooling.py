"""Shared tiling of the pools: max, average and power-average pooling over 1, 2 or 3
spatial dims, over fixed windows (a kernel size, stride, padding and dilation) or
adaptive ones (torch's adaptive pools: output o of n along a dim of length L reads
[floor(o * L / n), ceil((o + 1) * L / n))).

Every pool is a 3-d pool here: the runtime passes (N, C, D, H, W) views, a 2-d pool's
with D = 1 and a 1-d pool's with D = H = 1, and windows of size 1 along the dims it
adds, so that one kernel serves every dimensionality (aot/runtime/_windows.py). An AOT
kernel cannot specialise on a window as upstream's JIT kernels do (their kernel size,
stride, padding and dilation are constexpr symbols of ninetoothed's `tile`): here the
window is 12 int32 scalars read at run time (`WINDOW`).

A program takes `block_size` outputs (the outputs flattened, as upstream's pools tile
them) and walks their windows in tiles of `window_size` elements: a
(block_size, window_size) tile of lanes, each an element of its output's window whose
coordinates the application computes (`lanes`) and gathers through the input's
strides. ninetoothed's window tiling (pad, then `tile` with strides and dilation, then
flattened: upstream's pooling.py) loads the same elements, and this file's first
version used it, but the kernels need each lane's coordinates anyway (padding and
adaptive windows, max_pool's indices, the tail of the last tile), which ninetoothed's
`offsets` gives along one axis of a tile only; computed once here, they also address
the loads, and the kernels compile faster (tests/benchmarks/profile_build.py, sm_90,
per kernel: max_pool 2.2 s -> 1.5 s, avg_pool 3.6 s -> 2.5 s, on a loaded 2-core
machine).

An adaptive window is not a fixed stride's: the runtime passes a fixed window that
covers every output's, and `lanes` keeps each output's own elements of it.
"""

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.space import Config

NDIM = 5
# What the launcher checks of the pools' tensors: batch and channels agree.
DIMS = ("batch", "channels", None, None, None)
# The window's scalars, in the kernels' order: kernel size, stride, padding and
# dilation, each along D, H and W.
WINDOW = ("kd", "kh", "kw", "sd", "sh", "sw", "pd", "ph", "pw", "dd", "dh", "dw")
# 128 outputs a program, their windows in tiles of 16 elements (a 3x3 window in one
# tile), 4 warps: 16 lanes a thread. Not measured on a GPU yet.
CONFIG = Config({"block_size": 128, "window_size": 16}, num_warps=4, num_stages=1)


def tensors(input, outputs, scalars, window_size):
    """A premake's tensors: the outputs first (ninetoothed launches a program per block
    of its first argument: the outputs' count is the launcher's to compute, the
    windows' is not), the input, the window's scalars (`WINDOW`), the op's own
    `scalars`, and the tile's width as a constant."""
    window = tuple(Tensor(0, dtype=ninetoothed.int32) for _ in WINDOW)
    width = Tensor(0, constexpr=True, value=window_size)
    return (*outputs, input, *window, *scalars, width)


def arrangement(*tensors, outputs, block_size):
    """The `outputs` (the first tensors) by blocks of `block_size`; the input as it is,
    read through its pointer and strides; the scalars as they are."""
    blocks = tuple(tensor.flatten().tile((block_size,)) for tensor in tensors[:outputs])
    # Tiled only so that the application can name its source (`input.source`).
    input = tensors[outputs].tile((1,) * NDIM)
    return (*blocks, input, *tensors[outputs + 1 :])


# ---- the applications' pieces -------------------------------------------------------
# ninetoothed inlines these into the applications, one level deep (a helper's helpers
# would share its temporaries' names), each called in a statement of its own (two in
# one tuple assignment lost their bodies) and outside `if` branches.


def low(o, length, count, adaptive):
    # Where each output's window may start along a dim (`o`: the outputs' indices along
    # it): the input's start, or an adaptive window's, floor(o * L / n) (in int64: o * L
    # may pass int32).
    return ntl.where(adaptive != 0, ntl.cast(o, ntl.int64) * length // count, 0)


def high(o, length, count, adaptive):
    # Where it must end: the input's end, or an adaptive window's, ceil((o + 1) * L / n).
    wide = ntl.cast(o, ntl.int64)
    return ntl.where(adaptive != 0, ((wide + 1) * length + count - 1) // count, length)


def lanes(o, k, stride, pad, dilation, start, end):
    # The input coordinate of each lane, (outputs, window elements), along a dim (`k`:
    # the elements' indices along it), or -1 outside [start, end) of its output: in
    # the padding, past the input, or outside an adaptive window.
    at = o[:, None] * stride - pad + k[None, :] * dilation
    return ntl.where((at >= start[:, None]) & (at < end[:, None]), at, -1)


def extent(o, length, size, stride, pad, mode, start, end):
    # What each output's sum is divided by along a dim, as torch's average pools count:
    # mode 0 the window clipped to the padded input, 1 to the input, 2 the adaptive
    # window [start, end).
    first = o * stride - pad
    last = ntl.minimum(first + size, length + pad)
    inside = ntl.minimum(last, length) - ntl.maximum(first, 0)
    counted = ntl.where(mode == 0, last - first, ntl.where(mode == 1, inside, end - start))
    return ntl.cast(counted, ntl.float32)
