"""conv2d: torch.nn.functional.conv2d with stride, padding (numbers; "valid" and
"same" the runtime turns into them), dilation, groups and an optional bias, accumulated
in fp32; fp32 inputs go through TF32 tensor cores unless torch's float32 matmul
precision is "highest" (its default: switch `fp32_precision`), upstream ntops's rule
for its conv2d and this wheel's for its products.

An implicit GEMM, per group: output rows (n, p, q) by output channels, each the sum
over (c, r, s) of input[n, c, p * sh - ph + r * dh, q * sw - pw + s * dw] times
weight[k, c, r, s]. A program owns a (block_m, block_n) tile of one group's product
and walks the reduction in block_k steps: the input's tile gathered from the window's
coordinates (zero in the padding), the weight's read as a matrix, `dot` accumulating.
Upstream's conv2d tiles the same windows with ninetoothed (pad, `tile` with strides
and dilation, then mm's arrangement) with the geometry as constexpr symbols; here it is
read at run time, and the gathers are computed in the application as the pools'
(kernels/_lib/pooling.py says why). This is a simple correct kernel, not the product
library's tile loop (kernels/_lib/products.py): no TMA, no grouped order, no tuning.

The runtime (aot/runtime/_conv2d.py) passes (N, G, C/G, H, W) views of the input,
(G, K/G, C/G, R, S) of the weight, (G, K/G) of the bias and (N, G, K/G, P, Q) of the
output, and works out the output's size and the padding.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(5,),
    switches={"fp32_precision": ("tf32", "ieee")},
    switch_dtypes={"fp32_precision": ("fp32",)},
    coalesce="none",
    dims={
        "output": ("batch", "groups", "out_channels", None, None),
        "input": ("batch", "groups", "in_channels", None, None),
        "weight": ("groups", "out_channels", "in_channels", None, None),
        "bias": ("groups", "out_channels"),
    },
    specs=("generic",),
)

API = Api(
    "(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0, "
    "int[1] dilation=1, int groups=1)",
    "torch.nn.functional.conv2d",
    wrapper="_conv2d",
    samples=(
        sample(input=(2, 3, 19, 23), weight=(4, 3, 3, 3), bias=(4,)),
        sample(input=(2, 3, 19, 23), weight=(4, 3, 1, 1)),
        sample(input=(2, 6, 19, 23), weight=(8, 3, 3, 2), stride=2, padding=[2, 1], groups=2),
        sample(input=(2, 3, 19, 23), weight=(5, 3, 3, 3), bias=(5,), dilation=[2, 3]),
        sample(input=(3, 19, 23), weight=(4, 3, 2, 2), padding=1, dilation=2),
    ),
    # TF32's, for fp32: torch's fp32 convolutions take TF32 by default
    # (torch.backends.cudnn.allow_tf32), each result off by up to 2^-10 of the sum of
    # |x * w| over its terms (at most 27 here: about 17 for normal values, the results
    # about 5), ours not unless the matmul precision says so.
    tolerance={"fp32": (1e-2, 1e-2)},
)

# 64 x 64 output tiles in 32-deep steps, 4 warps. Not measured on a GPU yet.
CONFIG = Config({"block_m": 64, "block_n": 64, "block_k": 32}, num_warps=4, num_stages=2)


def arrangement(output, input, weight, bias, *rest, block_m, block_n):
    """One program per (block_m, block_n) tile of a group's (rows, channels) product,
    rows being the output's (n, p, q); the input, weight and bias read through their
    pointers and strides (tiled only so that the application can name their sources)."""
    rows = output.permute((1, 0, 3, 4, 2)).flatten(start_dim=1, end_dim=4)
    tiles = rows.tile((1, block_m, block_n))
    tiles.dtype = tiles.dtype.squeeze(0)
    sources = (tensor.tile((1,) * tensor.ndim) for tensor in (input, weight, bias))
    return (tiles, *sources, *rest)


def application(
    output, input, weight, bias, sh, sw, ph, pw, dh, dw, has_bias,
    block_m, block_n, block_k, precision,
):  # fmt: skip
    channels, height, width = input.source.shape[2], input.source.shape[3], input.source.shape[4]
    kernels, rs, ss = weight.source.shape[1], weight.source.shape[3], weight.source.shape[4]
    ps, qs = output.source.shape[3], output.source.shape[4]
    rows = input.source.shape[0] * ps * qs
    tiles_m = (rows + block_m - 1) // block_m
    tiles_n = (kernels + block_n - 1) // block_n
    pid = ntl.program_id(0)
    g = pid // (tiles_m * tiles_n)
    m = (pid // tiles_n) % tiles_m * block_m + ntl.arange(0, block_m)
    j = pid % tiles_n * block_n + ntl.arange(0, block_n)
    n, p, q = m // (ps * qs), (m // qs) % ps, m % qs
    row = n * input.source.stride(0) + g * input.source.stride(1)
    column = g * weight.source.stride(0) + j * weight.source.stride(1)
    depth = channels * rs * ss
    total = ntl.zeros((block_m, block_n), ntl.float32)
    for start in range(0, depth, block_k):
        kk = start + ntl.arange(0, block_k)
        c, r, s = kk // (rs * ss), (kk // ss) % rs, kk % ss
        h = p[:, None] * sh - ph + r[None, :] * dh
        w = q[:, None] * sw - pw + s[None, :] * dw
        inside = (m < rows)[:, None] & (kk < depth)[None, :]
        inside = inside & (h >= 0) & (h < height) & (w >= 0) & (w < width)
        at = row[:, None] + c[None, :] * input.source.stride(2)
        at += h * input.source.stride(3) + w * input.source.stride(4)
        a = ntl.load(input.source.data_ptr() + at, mask=inside, other=0.0)
        taps = (
            c * weight.source.stride(2) + r * weight.source.stride(3) + s * weight.source.stride(4)
        )
        used = (kk < depth)[:, None] & (j < kernels)[None, :]
        b = ntl.load(
            weight.source.data_ptr() + taps[:, None] + column[None, :], mask=used, other=0.0
        )
        total = ntl.dot(a, b, total, input_precision=precision)
    if has_bias != 0:
        at = g * bias.source.stride(0) + j * bias.source.stride(1)
        added = ntl.load(bias.source.data_ptr() + at, mask=j < kernels, other=0.0)
        total += ntl.cast(added, ntl.float32)[None, :]
    output = total


def config(variant):
    return CONFIG


def premake(ndim, dtype, fp32_precision="tf32", block_m=64, block_n=64, block_k=32):
    tensors = (
        Tensor(ndim, dtype=dtype),
        Tensor(ndim, dtype=dtype),
        Tensor(ndim, dtype=dtype),
        Tensor(2, dtype=dtype),
        *(Tensor(0, dtype=ninetoothed.int32) for _ in range(7)),
        *(Tensor(0, constexpr=True, value=v) for v in (block_m, block_n, block_k, fp32_precision)),
    )
    arrange = functools.partial(arrangement, block_m=block_m, block_n=block_n)
    return arrange, application, tensors
