"""Row-wise functions: softmax, rms_norm, layer_norm. The kernels reduce the last dim;
these move or flatten the dims asked for there, as views."""

import torch

from ntops_prebuilt import _C
from ntops_prebuilt import _checks as check

_launch = _C.launch
_SOFTMAX = _C.group("softmax")
_RMS_NORM = check.groups("rms_norm", "weight", ("given", "none"))
_LAYER_NORM = {
    (weight, bias): _C.group(f"layer_norm-weight={weight}-bias={bias}")
    for weight in ("given", "none")
    for bias in ("given", "none")
}
_EPS = {dtype: torch.finfo(dtype).eps for dtype in (torch.float16, torch.bfloat16, torch.float32)}


def softmax(input, dim, dtype=None):
    """torch.softmax; with `dtype`, the input is converted first, as torch does."""
    check.tensor("softmax", "input", input)
    if dtype is not None and input.dtype != dtype:
        input = input.to(dtype)
    ndim = input.ndim
    if ndim == 0:
        return _launch(_SOFTMAX, input.reshape(1), None).reshape(())
    dim = check.dim("softmax", dim, ndim)
    if dim == ndim - 1:
        return _launch(_SOFTMAX, input, None)
    # The kernel reduces the last dim: move `dim` there as a view, and back.
    return _launch(_SOFTMAX, input.transpose(dim, -1), None).transpose(dim, -1)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm over the trailing `normalized_shape` dims;
    eps None means torch.finfo(input.dtype).eps."""
    check.tensor("rms_norm", "input", input)
    shape = check.normalized("rms_norm", input, normalized_shape)
    weight = check.vector("rms_norm", "weight", weight, shape)
    if eps is None:
        eps = _EPS.get(input.dtype, 0.0)
    rows = input if len(shape) == 1 else input.flatten(-len(shape))
    if weight is None:
        out = _launch(_RMS_NORM["none"], rows, eps, None)
    else:
        out = _launch(_RMS_NORM["given"], rows, weight, eps, None)
    return out if len(shape) == 1 else out.view(input.shape)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the trailing `normalized_shape` dims."""
    check.tensor("layer_norm", "input", input)
    shape = check.normalized("layer_norm", input, normalized_shape)
    weight = check.vector("layer_norm", "weight", weight, shape)
    bias = check.vector("layer_norm", "bias", bias, shape)
    rows = input if len(shape) == 1 else input.flatten(-len(shape))
    group = _LAYER_NORM["none" if weight is None else "given", "none" if bias is None else "given"]
    vectors = [vector for vector in (weight, bias) if vector is not None]
    out = _launch(group, rows, *vectors, eps, None)
    return out if len(shape) == 1 else out.view(input.shape)
