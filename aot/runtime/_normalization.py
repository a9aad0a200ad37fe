"""Row-wise functions: softmax, rms_norm, layer_norm. The kernels reduce the last dim;
these move or flatten the dims asked for there, as views."""

import torch

from ntops_prebuilt import _C
from ntops_prebuilt import _checks as check
from ntops_prebuilt._errors import NotBuiltError
from ntops_prebuilt._library import routed

_launch = _C.launch
_SOFTMAX = _C.group("softmax")
_RMS_NORM = check.groups("rms_norm", "weight", ("given", "none"))
_LAYER_NORM = {
    (weight, bias): _C.group(f"layer_norm-weight={weight}-bias={bias}")
    for weight in ("given", "none")
    for bias in ("given", "none")
}
# eps=None: torch takes the epsilon of the type it computes in (float for half
# types), not of the input's: fp16's 9.8e-4 would flatten rows of small values.
_EPS = torch.finfo(torch.float32).eps


@routed("softmax")
def softmax(input, dim, dtype=None):
    """torch.softmax; with `dtype`, the input is converted first, as torch does."""
    check.tensor("softmax", "input", input)
    if dtype is not None and input.dtype != dtype:
        input = input.to(dtype)
    ndim = input.ndim
    if ndim == 0:
        check.dim("softmax", dim, 1)  # a 0-dim tensor takes dims 0 and -1, as in torch
        return _launch(_SOFTMAX, input.reshape(1), None).reshape(())
    dim = check.dim("softmax", dim, ndim)
    if dim == ndim - 1:
        return _rows(_SOFTMAX, input)
    # The kernel reduces the last dim: move `dim` there as a view, and back.
    return _rows(_SOFTMAX, input.transpose(dim, -1)).transpose(dim, -1)


def _rows(group, rows, *rest):
    """Launch a row-wise kernel; where the leading dims of `rows` do not merge into
    the dims the wheel has kernels for (a permuted view, say), on a contiguous copy
    of it: one more read and write of the input."""
    try:
        return _launch(group, rows, *rest, None)
    except NotBuiltError:
        if rows.is_contiguous():
            raise
        return _launch(group, rows.contiguous(), *rest, None)


@routed("rms_norm")
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm over the trailing `normalized_shape` dims;
    eps None means float32's epsilon, as torch computes half types in float."""
    check.tensor("rms_norm", "input", input)
    shape = check.normalized("rms_norm", input, normalized_shape)
    weight = check.vector("rms_norm", "weight", weight, shape)
    if eps is None:
        eps = _EPS
    rows = input if len(shape) == 1 else input.flatten(-len(shape))
    welford = _welford(input, weight, rows.shape[-1])
    if weight is None:
        out = _rows(_RMS_NORM["none"], rows, eps, welford)
    else:
        out = _rows(_RMS_NORM["given"], rows, weight, eps, welford)
    return out if len(shape) == 1 else out.view(input.shape)


def _welford(input, weight, n):
    """1 where torch's CUDA rms_norm would take its Welford kernel, not its vectorized
    one (rows of a multiple of 4 elements, up to 2^24, with a contiguous input and
    weight at addresses aligned to 4 elements; torch copies others contiguous first):
    the two differ on rows holding an infinity, and the kernel follows the one torch
    runs. See kernels/rms_norm.py."""
    if n % 4 or n > 1 << 24:
        return 1
    alignment = 4 * input.element_size()
    for tensor in (input, weight):
        if tensor is not None and tensor.is_contiguous() and tensor.data_ptr() % alignment:
            return 1
    return 0


@routed("layer_norm")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the trailing `normalized_shape` dims."""
    check.tensor("layer_norm", "input", input)
    shape = check.normalized("layer_norm", input, normalized_shape)
    weight = check.vector("layer_norm", "weight", weight, shape)
    bias = check.vector("layer_norm", "bias", bias, shape)
    rows = input if len(shape) == 1 else input.flatten(-len(shape))
    group = _LAYER_NORM["none" if weight is None else "given", "none" if bias is None else "given"]
    vectors = [vector for vector in (weight, bias) if vector is not None]
    out = _rows(group, rows, *vectors, eps)
    return out if len(shape) == 1 else out.view(input.shape)
