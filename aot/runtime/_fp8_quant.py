"""FP8 quantization (float8_e4m3fn) as vLLM and SGLang call it: `per_token_group_quant_fp8`
(a scale per row and group of elements: DeepSeek-style 1 x 128 activation blocks, or
per token with the group a whole row) and `scaled_fp8_quant` (a scale for the tensor,
given or found, or per token). Scales are float32 dequantization factors (x ~ q *
scale), not reciprocals, as torch._scaled_mm takes them; a scale is max(amax, eps) /
448. Finite values saturate to +-448; NaN and infinities become NaN, as torch's cast
to float8_e4m3fn makes them. Built for sm_89 and newer (kernels/_lib/fp8.py)."""

import torch

from . import _C
from . import _checks as check
from ._fp8_reference import E4M3_MAX, PER_TOKEN_EPS, fused_floor
from ._library import fake, routed

_launch = _C.launch
_GROUPS = check.groups("per_token_group_quant_fp8", "group")
_PER_GROUP, _PER_ROW = _GROUPS[("128",)], _GROUPS[("row",)]
_PER_TENSOR = check.groups("scaled_fp8_quant")[()]
_RMS_NORM = check.groups("rms_norm_quant_fp8", "group")
_SILU_MUL = check.groups("silu_mul_quant_fp8", "group")
# rms_norm's eps when None: float32's, as torch computes half types in float.
_NORM_EPS = torch.finfo(torch.float32).eps
_INPUTS = (torch.float16, torch.bfloat16, torch.float32)
# The kernels' upper bound of a largest magnitude where none is given.
_NO_BOUND = float("inf")


def _input_checks(op, input):
    """What every quantizing function asks of its input: a float dtype, a last dim."""
    if input.dtype not in _INPUTS:
        raise TypeError(f"{op}: input must be float16, bfloat16 or float32, not {input.dtype}")
    if input.ndim == 0 or input.shape[-1] == 0:
        raise ValueError(f"{op}: input needs a last dim to quantize, got {list(input.shape)}")


def _group_shapes(op, input, group_size):
    """The rows and groups of `input`'s last dim, after refusing what has none."""
    _input_checks(op, input)
    n = input.shape[-1]
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise ValueError(f"{op}: group_size must be a positive int, not {group_size!r}")
    if n % group_size:
        raise ValueError(
            f"{op}: the last dim ({n}) must be a multiple of group_size ({group_size})"
        )
    if group_size not in (128, n):
        raise ValueError(
            f"{op}: group_size {group_size} is not built; the kernels take groups of 128 "
            f"and whole rows (group_size={n})"
        )
    return input.numel() // n, n // group_size


def _scales(rows, groups, column_major, device):
    if column_major:
        return torch.empty(groups, rows, dtype=torch.float32, device=device).t()
    return torch.empty(rows, groups, dtype=torch.float32, device=device)


@fake("per_token_group_quant_fp8")
def _fake(input, group_size, eps=1e-10, column_major_scales=False):
    rows, groups = _group_shapes("per_token_group_quant_fp8", input, group_size)
    output = torch.empty(input.shape, dtype=torch.float8_e4m3fn, device=input.device)
    scales = _scales(rows, groups, column_major_scales, input.device)
    return output, scales.view(*input.shape[:-1], groups) if not column_major_scales else scales


@routed("per_token_group_quant_fp8")
def per_token_group_quant_fp8(input, group_size, eps=1e-10, column_major_scales=False):
    """Quantize each row's groups of `group_size` elements of `input` (float16, bfloat16
    or float32, any leading dims) to float8_e4m3fn: (values as input's shape, float32
    scales of shape (*leading, last / group_size)). Groups of 128 (DeepSeek-style
    blocks) and whole rows (group_size = the last dim: per token) are built.
    `column_major_scales`: the scales as a (rows, groups) view of a (groups, rows)
    tensor, the layout DeepGEMM-style products read (2-dim input only)."""
    op = "per_token_group_quant_fp8"
    check.tensor(op, "input", input)
    rows, groups = _group_shapes(op, input, group_size)
    if column_major_scales and input.ndim != 2:
        raise ValueError(f"{op}: column_major_scales takes a 2-dim input, got {input.ndim} dims")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"{op}: eps must be a positive number, not {eps!r}")
    return _quantized_groups(input, rows, groups, float(eps), column_major_scales)


def _quantized_groups(input, rows, groups, eps, column_major, ub=_NO_BOUND):
    """per_token_group_quant_fp8's launch, on a checked call; `ub` bounds each group's
    largest magnitude (scaled_fp8_quant's `scale_ub`)."""
    flat = input.reshape(rows, input.shape[-1])
    scales = _scales(rows, groups, column_major, input.device)
    kernel = _PER_ROW if groups == 1 else _PER_GROUP
    output = _launch(kernel, flat, scales, eps, ub, None)
    if not column_major:
        scales = scales.view(*input.shape[:-1], groups)
    return output.view(input.shape), scales


@fake("scaled_fp8_quant")
def _fake_scaled(input, scale=None, use_per_token_if_dynamic=False, scale_ub=None):
    _scaled_checks("scaled_fp8_quant", input, scale, scale_ub, use_per_token_if_dynamic)
    output = torch.empty(input.shape, dtype=torch.float8_e4m3fn, device=input.device)
    if scale is None and use_per_token_if_dynamic:
        return output, torch.empty(
            input.numel() // input.shape[-1], 1, dtype=torch.float32, device=input.device
        )
    if scale is None:
        return output, torch.empty(1, dtype=torch.float32, device=input.device)
    return output, scale.clone()


def _scaled_checks(op, input, scale, scale_ub, per_token):
    _input_checks(op, input)
    if scale_ub is not None:
        if isinstance(scale_ub, bool) or not isinstance(scale_ub, (int, float)):
            raise TypeError(
                f"{op}: scale_ub must be a number (the kernels take it by value, so no "
                f"call reads it from GPU memory), not {type(scale_ub).__name__}"
            )
        if not scale_ub > 0:
            raise ValueError(f"{op}: scale_ub must be positive, not {scale_ub!r}")
        if scale is not None or not per_token:
            raise ValueError(
                f"{op}: scale_ub bounds dynamic per-token scales (as vLLM's): give no scale "
                "and use_per_token_if_dynamic=True"
            )
    if scale is None:
        return
    if scale.dtype != torch.float32 or scale.numel() != 1:
        raise ValueError(
            f"{op}: scale must be a float32 tensor of one element (a per-tensor scale), got "
            f"{scale.dtype} of shape {list(scale.shape)}"
        )
    if scale.device != input.device:
        raise ValueError(f"{op}: scale is on {scale.device}, input on {input.device}")


@routed("scaled_fp8_quant")
def scaled_fp8_quant(input, scale=None, use_per_token_if_dynamic=False, scale_ub=None):
    """vLLM's scaled_fp8_quant: `input` (float16, bfloat16 or float32) to float8_e4m3fn
    with one scale: `scale`, a float32 tensor of one element (static), or, where None,
    max(the tensor's largest magnitude, 1/512) / 448 (dynamic); with
    `use_per_token_if_dynamic` and no scale, one scale per token (row of the last dim),
    of shape (tokens, 1). `scale_ub`, with per-token scales only (as vLLM's): each
    token's largest magnitude is taken at most it (vLLM's and FBGEMM's activation
    bound, 1200 in FBGEMM FP8 checkpoints: a token past it saturates); a number here,
    where vLLM takes a tensor. Returns (values of input's shape, the scale)."""
    op = "scaled_fp8_quant"
    check.tensor(op, "input", input)
    if scale is not None:
        check.tensor(op, "scale", scale)
    _scaled_checks(op, input, scale, scale_ub, use_per_token_if_dynamic)
    bound = _NO_BOUND if scale_ub is None else float(scale_ub)
    if scale is None and use_per_token_if_dynamic:  # one group a row, checked above
        rows = input.numel() // input.shape[-1]
        values, scales = _quantized_groups(input, rows, 1, PER_TOKEN_EPS, False, bound)
        return values, scales.reshape(-1, 1)
    if scale is None:
        # The largest magnitude in one reduction (NaN if the tensor holds one, as
        # amax), then the scale; vLLM's dynamic path is two kernels and a memset too.
        # (torch divides by 448 as a product with its reciprocal: the scale is within
        # an ulp of the quotient; the values are quantized with the scale returned.)
        scale = torch.linalg.vector_norm(input, float("inf"), dtype=torch.float32).reshape(1)
        scale = scale.clamp_(min=PER_TOKEN_EPS).div_(E4M3_MAX)
        return _launch(_PER_TENSOR, input, scale.reshape(()), None), scale
    # A copy of the given scale, not the scale: a torch.library op's results alias none
    # of its arguments (vLLM's function returns the argument itself).
    return _launch(_PER_TENSOR, input, scale.reshape(()), None), scale.clone()


def _fused_shapes(op, input, group_size, *others):
    """(rows, groups, the kernel's switch) of a fused form's call, after its checks:
    `others` are (name, tensor, shape it must have) of its other tensors."""
    if group_size is None:
        group_size = input.shape[-1] if input.ndim else 1
    rows, groups = _group_shapes(op, input, group_size)
    for name, tensor, shape in others:
        if tensor.dtype != input.dtype:
            raise TypeError(f"{op}: {name} is {tensor.dtype}, input {input.dtype}: pass one dtype")
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(
                f"{op}: {name} must have shape {list(shape)}, got {list(tensor.shape)}"
            )
        if tensor.device != input.device:
            raise ValueError(f"{op}: {name} is on {tensor.device}, input on {input.device}")
    return rows, groups, ("row",) if groups == 1 else ("128",)


def _fused_results(input, rows, groups):
    output = torch.empty(input.shape, dtype=torch.float8_e4m3fn, device=input.device)
    return output, torch.empty(*input.shape[:-1], groups, dtype=torch.float32, device=input.device)


@fake("rms_norm_quant_fp8")
def _fake_rms_norm(input, weight, eps=None, group_size=None):
    op = "rms_norm_quant_fp8"
    rows, groups, _ = _fused_shapes(op, input, group_size, ("weight", weight, input.shape[-1:]))
    return _fused_results(input, rows, groups)


@routed("rms_norm_quant_fp8")
def rms_norm_quant_fp8(input, weight, eps=None, group_size=None):
    """rms_norm of `input` over its last dim times `weight`, quantized to float8_e4m3fn
    in the same pass: (values of input's shape, float32 scales of shape (*leading,
    groups)), a scale per token (group_size None, or the last dim) or per group of 128,
    found from the normalized values in fp32. eps None: float32's, as rms_norm's.
    Scales are at least 1 / (512 * 448) per token, 1e-10 / 448 per group."""
    op = "rms_norm_quant_fp8"
    check.tensor(op, "input", input)
    check.tensor(op, "weight", weight)
    n = input.shape[-1] if input.ndim else 0
    rows, groups, switch = _fused_shapes(op, input, group_size, ("weight", weight, (n,)))
    eps = _NORM_EPS if eps is None else eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"{op}: eps must be a number of at least 0, not {eps!r}")
    scales = torch.empty(rows, groups, dtype=torch.float32, device=input.device)
    floor = fused_floor(n, group_size)
    flat = input.reshape(rows, n)
    output = _launch(_RMS_NORM[switch], flat, weight, float(eps), scales, floor, None)
    return output.view(input.shape), scales.view(*input.shape[:-1], groups)


@fake("silu_mul_quant_fp8")
def _fake_silu_mul(input, other, group_size=None):
    op = "silu_mul_quant_fp8"
    rows, groups, _ = _fused_shapes(op, input, group_size, ("other", other, input.shape))
    return _fused_results(input, rows, groups)


@routed("silu_mul_quant_fp8")
def silu_mul_quant_fp8(input, other, group_size=None):
    """silu(input) * other quantized to float8_e4m3fn in one pass (a SwiGLU MLP's gate
    before an FP8 down projection): (values of input's shape, float32 scales of shape
    (*leading, groups)), a scale per token (group_size None, or the last dim) or per
    group of 128, found from the products in fp32; `other` of input's shape and dtype.
    Scales are at least 1 / (512 * 448) per token, 1e-10 / 448 per group."""
    op = "silu_mul_quant_fp8"
    check.tensor(op, "input", input)
    check.tensor(op, "other", other)
    shape = input.shape
    rows, groups, switch = _fused_shapes(op, input, group_size, ("other", other, shape))
    n = input.shape[-1]
    scales = torch.empty(rows, groups, dtype=torch.float32, device=input.device)
    flat, other_flat = input.reshape(rows, n), other.reshape(rows, n)
    floor = fused_floor(n, group_size)
    output = _launch(_SILU_MUL[switch], flat, other_flat, scales, floor, None)
    return output.view(shape), scales.view(*shape[:-1], groups)
