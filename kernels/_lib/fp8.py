"""FP8 quantization's arithmetic, shared by the quantizing kernels (float8_e4m3fn:
largest finite 448, no infinity). These are imported by name into each kernel file:
ninetoothed takes the Triton functions an application calls from its module's globals.

A scale is a float32 dequantization factor (x ~ q * scale), as torch._scaled_mm's and
vLLM's. The values are multiplied by the scale's reciprocal (IEEE-rounded, once per
scale), as vLLM's kernels do: a precise division per element made the kernels
compute-bound (H100, 2048 x 4096 bf16: 0.31-0.43 of a copy's bandwidth), then rounded
to nearest even into e4m3fn by the conversion."""

import triton
import triton.language as tl

E4M3 = "fp8e4nv"  # Triton's name of torch.float8_e4m3fn


@triton.jit
def largest(x, axis):
    """The largest magnitude of a tile along `axis`, in fp32: NaN where a slice holds
    one, as torch's `x.abs().amax()` (Triton's max drops NaN)."""
    nans = tl.sum((x != x).to(tl.int32), axis)
    return tl.where(nans > 0, float("nan"), tl.max(tl.abs(x), axis))


@triton.jit
def scale_of(amax, eps):
    """max(amax, eps) / 448: the scale that maps the largest magnitude to e4m3fn's
    largest finite value (NaN stays NaN)."""
    return tl.math.div_rn(tl.maximum(amax, eps, propagate_nan=tl.PropagateNan.ALL), 448.0)


@triton.jit
def reciprocal(scale):
    """1 / scale, IEEE-rounded (as torch.reciprocal)."""
    return tl.math.div_rn(1.0 + tl.zeros_like(scale), scale)


@triton.jit
def quantized(x, inverse):
    """x * inverse (a scale's reciprocal) saturated to +-448 in fp32, ready for the
    conversion: NaN stays NaN and an infinite x becomes NaN, as torch's cast to
    float8_e4m3fn makes it."""
    y = x * inverse
    y = tl.minimum(tl.maximum(y, -448.0, propagate_nan=tl.PropagateNan.ALL), 448.0,
                   propagate_nan=tl.PropagateNan.ALL)  # fmt: skip
    return tl.where(tl.abs(x) == float("inf"), float("nan"), y)


@triton.jit
def bounded(amax, ub):
    """min(amax, ub): a dynamic scale's largest magnitude held at an upper bound (vLLM's
    and FBGEMM's `scale_ub`; +inf: none), NaN staying NaN."""
    return tl.minimum(amax, ub, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def most(a, b):
    """max(a, b), NaN if either is."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def group_scales(y, floor, GROUP: tl.constexpr):
    """The scales of a (rows, width) tile's groups of GROUP columns: (rows, width /
    GROUP)."""
    ROWS: tl.constexpr = y.shape[0]
    WIDTH: tl.constexpr = y.shape[1]
    groups = tl.reshape(y, (ROWS, WIDTH // GROUP, GROUP))
    return scale_of(largest(groups, 2), floor)


@triton.jit
def group_quantized(y, scales, GROUP: tl.constexpr):
    """A (rows, width) tile quantized group by group with `scales` (rows, width /
    GROUP), ready for the conversion."""
    ROWS: tl.constexpr = y.shape[0]
    WIDTH: tl.constexpr = y.shape[1]
    groups = tl.reshape(y, (ROWS, WIDTH // GROUP, GROUP))
    return tl.reshape(quantized(groups, reciprocal(scales)[:, :, None]), (ROWS, WIDTH))
