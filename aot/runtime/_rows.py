"""What the row-wise functions share (softmax, rms_norm, layer_norm): their kernels
reduce the last dim of the leading dims merged."""

import torch

from . import _C
from . import _checks as check
from ._errors import NotBuiltError

_launch = _C.launch
# eps=None: torch takes the epsilon of the type it computes in (float for half
# types), not of the input's: fp16's 9.8e-4 would flatten rows of small values.
EPS = torch.finfo(torch.float32).eps


def rows(group, rows, *rest):
    """Launch a row-wise kernel; where the leading dims of `rows` do not merge into
    the dims the wheel has kernels for (a permuted view, say), on a contiguous copy
    of it: one more read and write of the input."""
    try:
        return _launch(group, rows, *rest, None)
    except NotBuiltError:
        if rows.is_contiguous():
            raise
        return _launch(group, rows.contiguous(), *rest, None)


def along(op, group, input, dim, dtype):
    """A row-wise kernel (softmax, log_softmax) over `dim` of `input`: the kernel
    reduces the last dim, so `dim` is moved there as a view, and back; with `dtype`,
    the input is converted first, as torch does."""
    check.tensor(op, "input", input)
    if dtype is not None and input.dtype != dtype:
        input = input.to(dtype)
    ndim = input.ndim
    if ndim == 0:
        check.dim(op, dim, 1)  # a 0-dim tensor takes dims 0 and -1, as in torch
        return _launch(group, input.reshape(1), None).reshape(())
    dim = check.dim(op, dim, ndim)
    if dim == ndim - 1:
        return rows(group, input)
    return rows(group, input.transpose(dim, -1)).transpose(dim, -1)
