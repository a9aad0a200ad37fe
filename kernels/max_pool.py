"""Max pooling (torch.nn.functional.max_pool1d, max_pool2d, max_pool3d and
adaptive_max_pool2d): each output the largest element of its window, NaN the largest
of all, and with `want` set its index into the input's (D, H, W) plane, as torch's
return_indices gives it: the first of equal maxima in the window's order, the last NaN,
and where every element is -inf the window's first element inside the input. A window
wholly inside the padding (a padding over half the kernel, which torch refuses and
upstream's pools take) holds no element: -inf, index -1.

One kernel serves the four functions (kernels/_lib/pooling.py: every pool a 3-d pool
of a window read at run time); aot/runtime/_max_pool.py works out the window and the
output's size. Without return_indices the indices are a stand-in of one element per
(n, c) plane, which the kernel never writes (`want` 0).

A program keeps, per output, the largest value seen and its index; each tile of the
window gives its own (the least index among lanes equal to its maximum, the greatest
among its NaNs), which replaces them where it is larger, or NaN: tiles come in the
window's order.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import pooling
from ._lib.pooling import high, lanes, low  # ninetoothed inlines them

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(pooling.NDIM,),
    coalesce="none",
    outputs=("output", "indices"),
    dims={"output": pooling.DIMS, "indices": pooling.DIMS, "input": pooling.DIMS},
    specs=("generic",),
)

_FIXED = (
    "(Tensor input, int[1] kernel_size, int[1]? stride=None, int[1] padding=0, "
    "int[1] dilation=1, bool ceil_mode=False, bool return_indices=False)"
)
API = (
    Api(
        _FIXED,
        "torch.nn.functional.max_pool1d",
        name="max_pool1d",
        wrapper="_max_pool",
        returns="(Tensor, Tensor)",
        samples=(
            sample(input=(2, 3, 37), kernel_size=3),
            sample(input=(2, 3, 37), kernel_size=4, stride=3, padding=2, ceil_mode=True),
            sample(input=(3, 37), kernel_size=2, dilation=3, return_indices=True),
        ),
    ),
    Api(
        _FIXED,
        "torch.nn.functional.max_pool2d",
        name="max_pool2d",
        wrapper="_max_pool",
        returns="(Tensor, Tensor)",
        samples=(
            sample(input=(2, 3, 19, 23), kernel_size=[3, 3]),
            sample(input=(2, 3, 19, 23), kernel_size=3, stride=2, padding=1, ceil_mode=True),
            sample(input=(2, 3, 19, 23), kernel_size=[2, 3], stride=[1, 2], dilation=[2, 1]),
            sample(input=(3, 19, 23), kernel_size=2, return_indices=True),
        ),
    ),
    Api(
        _FIXED,
        "torch.nn.functional.max_pool3d",
        name="max_pool3d",
        wrapper="_max_pool",
        returns="(Tensor, Tensor)",
        samples=(
            sample(input=(2, 3, 9, 11, 13), kernel_size=2),
            sample(input=(2, 3, 9, 11, 13), kernel_size=[3, 2, 3], stride=2, padding=1),
            sample(input=(3, 9, 11, 13), kernel_size=3, ceil_mode=True, return_indices=True),
        ),
    ),
    Api(
        "(Tensor input, int[1] output_size, bool return_indices=False)",
        "torch.nn.functional.adaptive_max_pool2d",
        name="adaptive_max_pool2d",
        wrapper="_max_pool",
        returns="(Tensor, Tensor)",
        samples=(
            sample(input=(2, 3, 19, 23), output_size=[5, 7]),
            sample(input=(2, 3, 19, 23), output_size=1, return_indices=True),
            sample(input=(3, 5, 6), output_size=[7, 4]),
        ),
    ),
)

CONFIG = pooling.CONFIG
# The outputs by blocks, the input read through its pointer (kernels/_lib/pooling.py).
arrangement = pooling.arrangement


def application(
    output, indices, input, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, adaptive, want, window
):
    channels, depth = input.source.shape[1], input.source.shape[2]
    height, width = input.source.shape[3], input.source.shape[4]
    od, oh, ow = output.source.shape[2], output.source.shape[3], output.source.shape[4]
    m = ntl.program_id(0) * output.shape[0] + ntl.arange(0, output.shape[0])
    o_d, o_h, o_w = (m // (oh * ow)) % od, (m // ow) % oh, m % ow
    plane = m // (od * oh * ow)  # n * C + c
    live = plane < input.source.shape[0] * channels
    base = (plane // channels) * input.source.stride(0)
    base += (plane % channels) * input.source.stride(1)
    start_d = low(o_d, depth, od, adaptive)
    end_d = high(o_d, depth, od, adaptive)
    start_h = low(o_h, height, oh, adaptive)
    end_h = high(o_h, height, oh, adaptive)
    start_w = low(o_w, width, ow, adaptive)
    end_w = high(o_w, width, ow, adaptive)
    best = ntl.full(output.shape, float("-inf"), ntl.float32)
    found = ntl.full(output.shape, -1, ntl.int64)  # -1: no element seen yet
    for t in range((kd * kh * kw + window - 1) // window):
        k = t * window + ntl.arange(0, window)
        d = lanes(o_d, k // (kh * kw), sd, pd, dd, start_d, end_d)
        h = lanes(o_h, (k // kw) % kh, sh, ph, dh, start_h, end_h)
        w = lanes(o_w, k % kw, sw, pw, dw, start_w, end_w)
        keep = live[:, None] & (k < kd * kh * kw)[None, :] & (d >= 0) & (h >= 0) & (w >= 0)
        at = d * input.source.stride(2) + h * input.source.stride(3) + w * input.source.stride(4)
        x = ntl.load(input.source.data_ptr() + base[:, None] + at, mask=keep, other=float("-inf"))
        x = ntl.cast(x, ntl.float32)
        place = ntl.cast((d * height + h) * width + w, ntl.int64)  # torch's index
        nan = x != x
        largest = ntl.max(ntl.where(nan, float("-inf"), x), 1)
        # The first lane holding it (2^31 - 1 is past any index of a 32-bit kernel's
        # plane), the last NaN.
        first = ntl.min(ntl.where(keep & (x == largest[:, None]), place, 2147483647), 1)
        last_nan = ntl.max(ntl.where(nan, place, -1), 1)
        # A NaN replaces anything (torch takes `val > max || isnan(val)`: the last NaN);
        # after a NaN nothing else does; otherwise a strictly larger value, or the first.
        larger = (first != 2147483647) & (best == best) & ((largest > best) | (found < 0))
        best = ntl.where(last_nan >= 0, float("nan"), ntl.where(larger, largest, best))
        found = ntl.where(last_nan >= 0, last_nan, ntl.where(larger, first, found))
    output = best
    if want != 0:
        indices = found  # noqa: F841


def config(variant):
    return CONFIG


def premake(ndim, dtype, block_size=128, window_size=16):
    outputs = (Tensor(ndim, dtype=dtype), Tensor(ndim, dtype=ninetoothed.int64))
    flags = (Tensor(0, dtype=ninetoothed.int32), Tensor(0, dtype=ninetoothed.int32))
    tensors = pooling.tensors(Tensor(ndim, dtype=dtype), outputs, flags, window_size)
    arrange = functools.partial(arrangement, outputs=2, block_size=block_size)
    return arrange, application, tensors
