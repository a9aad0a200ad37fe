"""The ntops.torch API, served by prebuilt kernels.

Each function checks what only it can check (dims, shapes of its operands), then
hands tensors to the C launcher in the order of the kernel's `application`. The
launcher checks devices, dtypes and shapes, allocates outputs, merges dims,
picks the kernel and launches it on torch's current stream.
"""

import torch
from ntops_prebuilt import _C

_launch = _C.launch

_ADD = _C.group("add")
_MUL = _C.group("mul")
_GELU = {"none": _C.group("gelu-approximate=none"), "tanh": _C.group("gelu-approximate=tanh")}
_SOFTMAX = _C.group("softmax")
_RMS_NORM = _C.group("rms_norm-weight=given")
_RMS_NORM_WITHOUT_WEIGHT = _C.group("rms_norm-weight=none")
_MM = {
    "tf32": _C.group("mm-fp32_precision=tf32"),
    "ieee": _C.group("mm-fp32_precision=ieee"),
}
_EPS = {dtype: torch.finfo(dtype).eps for dtype in (torch.float16, torch.bfloat16, torch.float32)}


def add(input, other, *, alpha=1, out=None):
    """input + alpha * other, broadcasting like torch.add."""
    return _launch(_ADD, input, other, alpha, out)


def mul(input, other, *, out=None):
    """input * other, broadcasting like torch.mul."""
    return _launch(_MUL, input, other, out)


def gelu(input, approximate="none"):
    """torch.nn.functional.gelu: exact (erf) or with the tanh approximation."""
    group = _GELU.get(approximate)
    if group is None:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    return _launch(group, input, None)


def softmax(input, dim, dtype=None):
    """torch.softmax; with `dtype`, the input is converted first, as torch does."""
    _check_tensor("softmax", "input", input)
    if dtype is not None and input.dtype != dtype:
        input = input.to(dtype)
    ndim = input.ndim
    if ndim == 0:
        return _launch(_SOFTMAX, input.reshape(1), None).reshape(())
    dim = _dim("softmax", dim, ndim)
    if dim == ndim - 1:
        return _launch(_SOFTMAX, input, None)
    # The kernel reduces the last dim: move `dim` there as a view, and back.
    return _launch(_SOFTMAX, input.transpose(dim, -1), None).transpose(dim, -1)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm over the trailing `normalized_shape` dims;
    eps None means torch.finfo(input.dtype).eps."""
    _check_tensor("rms_norm", "input", input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    count = len(shape)
    if count == 0 or count > input.ndim or tuple(input.shape[input.ndim - count :]) != shape:
        raise ValueError(
            f"rms_norm: normalized_shape {list(shape)} must be the trailing dims of "
            f"input of shape {list(input.shape)}"
        )
    if eps is None:
        eps = _EPS.get(input.dtype, 0.0)
    rows = input if count == 1 else input.flatten(-count)
    if weight is None:
        out = _launch(_RMS_NORM_WITHOUT_WEIGHT, rows, eps, None)
    else:
        _check_tensor("rms_norm", "weight", weight)
        if tuple(weight.shape) != shape:
            raise ValueError(
                f"rms_norm: weight has shape {list(weight.shape)}, "
                f"normalized_shape is {list(shape)}"
            )
        out = _launch(_RMS_NORM, rows, weight if count == 1 else weight.reshape(-1), eps, None)
    return out if count == 1 else out.view(input.shape)


def mm(input, mat2, *, out=None):
    """input @ mat2 for 2-D tensors; fp32 through TF32 unless
    torch.get_float32_matmul_precision() is "highest"."""
    _check_tensor("mm", "input", input)
    _check_tensor("mm", "mat2", mat2)
    if input.ndim != 2 or mat2.ndim != 2:
        raise ValueError(f"mm: expected 2-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    rows, inner = input.shape
    if mat2.shape[0] != inner:
        raise ValueError(
            f"mm: input is {rows}x{inner} and mat2 is {mat2.shape[0]}x{mat2.shape[1]}; "
            "their inner dims must match"
        )
    shape = (rows, mat2.shape[1])
    if out is None:
        out = input.new_empty(shape)
    else:
        _check_tensor("mm", "out", out)
        if tuple(out.shape) != shape:
            raise ValueError(f"mm: out has shape {list(out.shape)}, the product is {list(shape)}")
    ieee = input.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest"
    _launch(_MM["ieee" if ieee else "tf32"], input, mat2, out)
    return out


def _check_tensor(op, name, value):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, not {type(value).__name__}")


def _dim(op, dim, ndim):
    if not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, not {type(dim).__name__}")
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"{op}: dim {dim} is out of range for a {ndim}-D tensor "
            f"(expected to be in range of [{-ndim}, {ndim - 1}])"
        )
    return dim % ndim
