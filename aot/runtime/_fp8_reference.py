"""The FP8 quantization functions in torch (aot/runtime/_fp8_quant.py's references: the
tests compare with them, and the ops' fakes): the same division, saturation and
rounding as the kernels (kernels/_lib/fp8.py). Imports torch only."""

import torch

E4M3_MAX = 448.0
# scaled_fp8_quant's dynamic scales, per token and per tensor, are at least 1 / (448 *
# 512), as vLLM's per-token ones: an all-zero row quantizes to zeros, not 0 / 0.
PER_TOKEN_EPS = 1.0 / 512


def group_reference(input, group_size, eps=1e-10, column_major_scales=False, ub=None):
    """per_token_group_quant_fp8 in torch (the tests' reference): the same division,
    saturation and rounding; `ub`, scaled_fp8_quant's upper bound of each largest
    magnitude (`scale_ub`)."""
    n = input.shape[-1]
    groups = n // group_size
    x = input.float().reshape(-1, groups, group_size)
    amax = x.abs().amax(-1, keepdim=True)
    if ub is not None:
        amax = amax.clamp(max=ub)  # NaN stays NaN
    amax = amax.clamp(min=eps)
    # Divided by a tensor: torch divides by a number as a product with its reciprocal,
    # an ulp off the quotient the kernels take.
    scale = amax / torch.full_like(amax, E4M3_MAX)
    values = _saturated(x, scale).to(torch.float8_e4m3fn).reshape(input.shape)
    scales = scale.reshape(*input.shape[:-1], groups)
    if column_major_scales:
        scales = scales.t().contiguous().t()
    return values, scales


def _saturated(x, scale):
    """x times the scale's reciprocal (IEEE-rounded, as the kernels take it) within
    +-448, NaN where x is infinite (as torch's cast makes it)."""
    y = (x * torch.reciprocal(scale)).clamp(-E4M3_MAX, E4M3_MAX)
    return torch.where(x.isinf(), torch.nan, y)


def scaled_reference(input, scale=None, use_per_token_if_dynamic=False, scale_ub=None):
    """scaled_fp8_quant in torch (the tests' reference)."""
    if scale is None and use_per_token_if_dynamic:
        n = input.shape[-1]
        values, scales = group_reference(input, n, PER_TOKEN_EPS, ub=scale_ub)
        return values, scales.reshape(-1, 1)
    if scale is None:  # as the runtime finds it: torch's division by a number
        amax = input.float().abs().amax().reshape(1)
        scale = amax.clamp(min=PER_TOKEN_EPS) / E4M3_MAX
    return _saturated(input.float(), scale.float()).to(torch.float8_e4m3fn), scale.clone()


# The fused forms' scales are at least these: per token as scaled_fp8_quant's, per
# group as per_token_group_quant_fp8's default.
GROUP_EPS = 1e-10


def fused_floor(n, group_size):
    """The least magnitude a fused form's scale takes: per token (group_size None or the
    row) PER_TOKEN_EPS, per group GROUP_EPS."""
    return PER_TOKEN_EPS if group_size in (None, n) else GROUP_EPS


def rms_norm_quant_reference(input, weight, eps=None, group_size=None):
    """rms_norm_quant_fp8 in torch: F.rms_norm in fp32, then quantized as
    per_token_group_quant_fp8 quantizes (the same scales' floor as the kernel's)."""
    n = input.shape[-1]
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    y = torch.nn.functional.rms_norm(input.float(), (n,), weight.float(), eps)
    return group_reference(y, group_size or n, fused_floor(n, group_size))


def silu_mul_quant_reference(input, other, group_size=None):
    """silu_mul_quant_fp8 in torch: silu(input) * other in fp32, then quantized."""
    n = input.shape[-1]
    y = torch.nn.functional.silu(input.float()) * other.float()
    return group_reference(y, group_size or n, fused_floor(n, group_size))
