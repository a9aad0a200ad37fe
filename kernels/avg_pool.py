"""Average and power-average pooling (torch.nn.functional.avg_pool2d,
adaptive_avg_pool2d, lp_pool1d, lp_pool2d and lp_pool3d): each output the sum over its
window, in fp32, divided as torch's pools divide it.

One kernel serves the five functions (kernels/_lib/pooling.py: every pool a 3-d pool
of a window read at run time); aot/runtime/_avg_pool.py works out the window and the
output's size. `mode` says what a sum is divided by: 0 the window clipped to the padded
input (count_include_pad), 1 to the input, 2 an adaptive window's size; `divisor`, where
it is not 0, replaces that (divisor_override).

With `norm` p not 0 it is torch's lp_pool: avg_pool of x ** p (no padding), then
(mean * window size) ** (1 / p), each step rounded to the input's dtype as torch's are
(x ** p, the mean and the product are tensors of it there), so that half types overflow
and round where torch's do. lp_pool's infinite norms are max pools (the runtime's).
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor
from ninetoothed.language import libdevice

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import pooling
from ._lib.pooling import extent, high, lanes, low  # ninetoothed inlines them

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(pooling.NDIM,),
    coalesce="none",
    dims={"output": pooling.DIMS, "input": pooling.DIMS},
    specs=("generic",),
)

_LP = (
    "(Tensor input, float norm_type, int[1] kernel_size, int[1]? stride=None, bool ceil_mode=False)"
)
# lp_pool1d's kernel size and stride are ints, as torch's lp_pool1d (the op's fake) takes them.
_LP1 = "(Tensor input, float norm_type, int kernel_size, int? stride=None, bool ceil_mode=False)"
API = (
    Api(
        "(Tensor input, int[1] kernel_size, int[1]? stride=None, int[1] padding=0, "
        "bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None)",
        "torch.nn.functional.avg_pool2d",
        name="avg_pool2d",
        wrapper="_avg_pool",
        samples=(
            sample(input=(2, 3, 19, 23), kernel_size=[3, 3]),
            sample(input=(2, 3, 19, 23), kernel_size=3, stride=2, padding=1, ceil_mode=True),
            sample(input=(2, 3, 19, 23), kernel_size=[2, 3], padding=1, count_include_pad=False),
            sample(input=(3, 19, 23), kernel_size=[3, 2], stride=[2, 1], divisor_override=4),
        ),
    ),
    Api(
        "(Tensor input, int[1] output_size)",
        "torch.nn.functional.adaptive_avg_pool2d",
        name="adaptive_avg_pool2d",
        wrapper="_avg_pool",
        samples=(
            sample(input=(2, 3, 19, 23), output_size=[5, 7]),
            sample(input=(2, 3, 19, 23), output_size=1),
            sample(input=(3, 5, 6), output_size=[7, 4]),
        ),
    ),
    Api(
        _LP1,
        "torch.nn.functional.lp_pool1d",
        name="lp_pool1d",
        wrapper="_avg_pool",
        samples=(
            sample(input=(2, 3, 37), norm_type=2.0, kernel_size=3),
            sample(input=(3, 37), norm_type=1.0, kernel_size=4, stride=3, ceil_mode=True),
        ),
    ),
    Api(
        _LP,
        "torch.nn.functional.lp_pool2d",
        name="lp_pool2d",
        wrapper="_avg_pool",
        samples=(
            sample(input=(2, 3, 19, 23), norm_type=2.0, kernel_size=[3, 2]),
            # An odd norm of positive values: over mixed signs a window's sum near 0
            # takes its sign from rounding, and torch's NaN (a negative ** (1/3)) with it.
            sample(
                input=(2, 3, 19, 23),
                norm_type=3.0,
                kernel_size=3,
                stride=2,
                ceil_mode=True,
                domain="positive",
            ),
        ),
    ),
    Api(
        _LP,
        "torch.nn.functional.lp_pool3d",
        name="lp_pool3d",
        wrapper="_avg_pool",
        samples=(
            sample(input=(2, 3, 9, 11, 13), norm_type=2.0, kernel_size=2),
            sample(input=(3, 9, 11, 13), norm_type=1.0, kernel_size=[3, 2, 2], ceil_mode=True),
        ),
    ),
)

CONFIG = pooling.CONFIG
# The outputs by blocks, the input read through its pointer (kernels/_lib/pooling.py).
arrangement = pooling.arrangement


def application(
    output, input, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, mode, divisor, norm, window
):
    channels, depth = input.source.shape[1], input.source.shape[2]
    height, width = input.source.shape[3], input.source.shape[4]
    od, oh, ow = output.source.shape[2], output.source.shape[3], output.source.shape[4]
    adaptive = mode // 2  # 1 for mode 2
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
    total = ntl.zeros(output.shape, ntl.float32)
    for t in range((kd * kh * kw + window - 1) // window):
        k = t * window + ntl.arange(0, window)
        d = lanes(o_d, k // (kh * kw), sd, pd, dd, start_d, end_d)
        h = lanes(o_h, (k // kw) % kh, sh, ph, dh, start_h, end_h)
        w = lanes(o_w, k % kw, sw, pw, dw, start_w, end_w)
        keep = live[:, None] & (k < kd * kh * kw)[None, :] & (d >= 0) & (h >= 0) & (w >= 0)
        at = d * input.source.stride(2) + h * input.source.stride(3) + w * input.source.stride(4)
        x = ntl.load(input.source.data_ptr() + base[:, None] + at, mask=keep, other=0.0)
        x = ntl.cast(x, ntl.float32)
        if norm != 0:  # x ** p, a tensor of the input's dtype in torch
            x = ntl.cast(ntl.cast(libdevice.pow(x, norm), output.dtype), ntl.float32)
        total += ntl.sum(ntl.where(keep, x, 0.0), 1)
    count = extent(o_d, depth, kd, sd, pd, mode, start_d, end_d)
    count = count * extent(o_h, height, kh, sh, ph, mode, start_h, end_h)
    count = count * extent(o_w, width, kw, sw, pw, mode, start_w, end_w)
    mean = total / ntl.where(divisor != 0, ntl.cast(divisor, ntl.float32), count)
    if norm != 0:  # torch: (sign(mean) * relu(|mean|) * window size) ** (1 / p)
        mean = ntl.cast(ntl.cast(mean, output.dtype), ntl.float32)
        scaled = ntl.cast(ntl.cast(mean * (kd * kh * kw), output.dtype), ntl.float32)
        mean = libdevice.pow(scaled, 1.0 / norm)
    output = mean


def config(variant):
    return CONFIG


def premake(ndim, dtype, block_size=128, window_size=16):
    scalars = (
        Tensor(0, dtype=ninetoothed.int32),
        Tensor(0, dtype=ninetoothed.int32),
        Tensor(0, dtype=ninetoothed.float32),
    )
    tensors = pooling.tensors(
        Tensor(ndim, dtype=dtype), (Tensor(ndim, dtype=dtype),), scalars, window_size
    )
    arrange = functools.partial(arrangement, outputs=1, block_size=block_size)
    return arrange, application, tensors
