"""Element-wise functions. The launcher broadcasts, checks `out`, allocates results and
merges dims; these only pick the kernel (tensor or scalar operand, switches)."""

import math

import torch

from ntops_prebuilt import _C
from ntops_prebuilt import _checks as check
from ntops_prebuilt._library import compiling, routed, traced

_launch = _C.launch
_Tensor = torch.Tensor
_SubclassError = _C.SubclassError


def _unary(name):
    group = _C.group(name)

    def function(input, *, out=None):
        # Tracing and tensor subclasses go to the op (_library.py); spelled out here,
        # not decorated, to spare the hottest functions a call.
        if compiling():
            return traced(name)(input, out=out)
        try:
            return _launch(group, input, out)
        except _SubclassError:
            return traced(name)(input, out=out)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch.{name} on prebuilt kernels."
    return function


abs = _unary("abs")
neg = _unary("neg")
exp = _unary("exp")
rsqrt = _unary("rsqrt")
sin = _unary("sin")
cos = _unary("cos")
sigmoid = _unary("sigmoid")
tanh = _unary("tanh")
bitwise_not = _unary("bitwise_not")

_RELU, _SILU = _C.group("relu"), _C.group("silu")
_ISNAN, _ISINF = _C.group("isnan"), _C.group("isinf")
_GELU = check.groups("gelu", "approximate", ("none", "tanh"))


@routed("relu")
def relu(input, inplace=False):
    """torch.relu; with inplace, input is overwritten and returned."""
    return _launch(_RELU, input, input if inplace else None)


@routed("silu")
def silu(input, inplace=False):
    """torch.nn.functional.silu; with inplace, input is overwritten and returned."""
    return _launch(_SILU, input, input if inplace else None)


_SILU_MUL = _C.group("silu_mul")


@routed("silu_mul")
def silu_mul(input, other, *, out=None):
    """silu(input) * other in one kernel, broadcasting like torch.mul: a SwiGLU MLP's
    `F.silu(gate) * up`, with gate and up often the halves of one projection's rows
    (`h[:, :n]`, `h[:, n:]`). Not in ntops.torch: a fusion real models need."""
    return _launch(_SILU_MUL, input, other, out)


@routed("gelu")
def gelu(input, approximate="none"):
    """torch.nn.functional.gelu: exact (erf) or with the tanh approximation."""
    group = _GELU.get(approximate)
    if group is None:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    return _launch(group, input, None)


@routed("isnan")
def isnan(input):
    """torch.isnan: a bool tensor."""
    return _launch(_ISNAN, input, None)


@routed("isinf")
def isinf(input):
    """torch.isinf: a bool tensor."""
    return _launch(_ISINF, input, None)


_ADD, _SUB, _MUL = (check.groups(op, "other", ("tensor", "scalar")) for op in ("add", "sub", "mul"))
_ADD_TENSOR, _ADD_SCALAR = _ADD["tensor"], _ADD["scalar"]


def add(input, other, *, alpha=1, out=None):
    """input + alpha * other, broadcasting like torch.add; other may be a number."""
    if compiling():
        return traced("add")(input, other, alpha=alpha, out=out)
    try:
        if type(other) is _Tensor and other.ndim:  # the common case first: no other checks
            return _launch(_ADD_TENSOR, input, other, alpha, out)
        if check.is_scalar(other):
            input, value = check.scalar_operand("add", "other", input, other)
            return _launch(_ADD_SCALAR, input, value, alpha, out)
        return _launch(_ADD_TENSOR, input, other, alpha, out)
    except _SubclassError:
        return traced("add")(input, other, alpha=alpha, out=out)


@routed("sub")
def sub(input, other, *, alpha=1, out=None):
    """input - alpha * other, broadcasting like torch.sub; other may be a number."""
    if other is True or other is False or _is_bool(input) or _is_bool(other):
        raise RuntimeError(
            "sub: subtraction with a bool tensor is not supported (as in torch); "
            "to invert a mask, use the ~ operator or torch.logical_not()"
        )
    if check.is_scalar(other):
        input, value = check.scalar_operand("sub", "other", input, other)
        return _launch(_SUB["scalar"], input, value, alpha, out)
    return _launch(_SUB["tensor"], input, other, alpha, out)


def _is_bool(value):
    return isinstance(value, _Tensor) and value.dtype == torch.bool


@routed("mul")
def mul(input, other, *, out=None):
    """input * other, broadcasting like torch.mul; other may be a number."""
    if check.is_scalar(other):
        input, value = check.scalar_operand("mul", "other", input, other)
        return _launch(_MUL["scalar"], input, value, out)
    return _launch(_MUL["tensor"], input, other, out)


_DIV = {
    (mode, kind): _C.group(f"div-rounding_mode={mode}-other={kind}")
    for mode in ("none", "trunc", "floor")
    for kind in ("tensor", "scalar")
}


@routed("div")
def div(input, other, *, rounding_mode=None, out=None):
    """input / other (torch.div): true division, or rounded with "trunc" or "floor"."""
    mode = "none" if rounding_mode is None else rounding_mode
    if (mode, "tensor") not in _DIV or rounding_mode == "none":
        raise ValueError(
            f"div: rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}"
        )
    if check.is_scalar(other):
        input, value = check.scalar_operand("div", "other", input, other)
        return _launch(_DIV[mode, "scalar"], input, value, out)
    return _launch(_DIV[mode, "tensor"], input, other, out)


_POW = check.groups("pow", "exponent", ("tensor", "scalar"))


@routed("pow")
def pow(input, exponent, *, out=None):
    """input ** exponent (torch.pow); exponent a tensor or a number."""
    if check.is_scalar(exponent):
        input, value = check.scalar_operand("pow", "exponent", input, exponent)
        # torch converts the exponent to the input's dtype, refusing one it overflows
        floating = isinstance(input, _Tensor) and input.dtype.is_floating_point
        if floating and math.isfinite(value) and math.fabs(value) > torch.finfo(input.dtype).max:
            raise RuntimeError(
                f"pow: exponent {value!r} cannot be converted to {input.dtype} "
                "without overflow (as torch refuses it)"
            )
        return _launch(_POW["scalar"], input, value, out)
    return _launch(_POW["tensor"], input, exponent, out)


_CLAMP = {
    (low, high): _C.group(f"clamp-min={low}-max={high}")
    for low in ("scalar", "tensor")
    for high in ("scalar", "tensor")
}


@routed("clamp")
def clamp(input, min=None, max=None, *, out=None):
    """torch.clamp: bounds both numbers or both tensors (broadcast with input), either
    may be None. NaN as torch on CUDA: a NaN element of input or of a tensor bound
    makes that element NaN, as do number bounds both given with one NaN; a lone NaN
    number is ignored."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    min, max = check.clamp_bounds(min, max)
    lone = max if min is None else min if max is None else None
    if isinstance(lone, float) and math.isnan(lone):
        return _launch(_CLAMP["scalar", "scalar"], input, -math.inf, math.inf, out)
    kinds, bounds = [], []
    for name, bound, missing in (("min", min, -math.inf), ("max", max, math.inf)):
        if bound is None:
            kinds.append("scalar")
            bounds.append(missing)
        elif isinstance(bound, _Tensor):
            # A CPU 0-dim tensor too: torch's clamp takes no CPU scalars beside CUDA
            # tensors (its tensor overload is not a binary op), and the launcher
            # refuses one as it refuses any CPU tensor.
            kinds.append("tensor")
            bounds.append(bound)
        else:
            kinds.append("scalar")
            bounds.append(check.scalar("clamp", name, bound, input))
    return _launch(_CLAMP[tuple(kinds)], input, *bounds, out)


def _binary(name):
    groups = check.groups(name, "other", ("tensor", "scalar"))

    def function(input, other, *, out=None):
        if compiling():
            return traced(name)(input, other, out=out)
        try:
            if check.is_scalar(other):
                input, value = check.scalar_operand(name, "other", input, other)
                return _launch(groups["scalar"], input, value, out)
            return _launch(groups["tensor"], input, other, out)
        except _SubclassError:
            return traced(name)(input, other, out=out)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"torch.{name} on prebuilt kernels; other may be a number."
    return function


eq, ne, lt, le, gt, ge = (_binary(name) for name in ("eq", "ne", "lt", "le", "gt", "ge"))
bitwise_and = _binary("bitwise_and")
bitwise_or = _binary("bitwise_or")

_DROPOUT = _C.group("dropout")


@routed("dropout")
def dropout(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout: each element zeroed with probability p, survivors
    scaled by 1 / (1 - p). The mask is drawn from torch's CUDA generator, so it is
    fresh per call and repeats under torch.manual_seed. (Captured in a CUDA graph,
    a replay reuses the captured mask.)"""
    check.tensor("dropout", "input", input)
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: p must be between 0 and 1, not {p}")
    if not training or p == 0 or input.numel() == 0:
        return input
    if not input.is_cuda:
        raise TypeError("dropout: expected a CUDA tensor; move it with .cuda()")
    generator = torch.cuda.default_generators[input.device.index]
    seed, offset = generator.initial_seed(), generator.get_offset()
    generator.set_offset(offset + (input.numel() + 3) // 4 * 4)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return _launch(_DROPOUT, input, seed, offset, p, scale, input if inplace else None)
