"""addmv: beta * input + alpha * (mat @ vec), one launch of kernels/addmv.py; the
launcher checks the shapes by their named dims (rows, inner) and broadcasts `input`
to the rows with stride 0."""

import torch

from . import _C
from . import _checks as check
from ._library import routed

_launch = _C.launch
_ADDMV = check.groups("addmv")[()]


@routed("addmv")
def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """torch.addmv: beta * input + alpha * (mat @ vec) for a 2-D `mat` and a 1-D `vec`,
    `input` of mat's rows or broadcast to them; accumulated in fp32. out= may be the
    input itself, as torch allows (each row of input is read before its result is
    written), not the vector (every row reads all of it)."""
    for name, tensor in (("input", input), ("mat", mat), ("vec", vec)):
        check.tensor("addmv", name, tensor)
    if mat.ndim != 2 or vec.ndim != 1:
        raise ValueError(
            f"addmv: expected a 2-D matrix and a 1-D vector, got {mat.ndim}-D and {vec.ndim}-D"
        )
    if out is None:
        out = torch.empty(mat.shape[0], dtype=mat.dtype, device=mat.device)
    elif _overlap(check.tensor("addmv", "out", out), vec):
        raise ValueError(
            "addmv: out and vec overlap in memory, and every row reads the whole vector: "
            "pass a separate output, or clone the vector"
        )
    _launch(_ADDMV, input, mat, vec, beta, alpha, out)
    return out


def _overlap(one, other):
    """Whether the bytes two tensors' elements lie in meet."""
    if one.numel() == 0 or other.numel() == 0:
        return False
    (first, last), (other_first, other_last) = _span(one), _span(other)
    return first < other_last and other_first < last


def _span(tensor):
    """The bytes a tensor's elements lie in, [first, last)."""
    extent = sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )
    first = tensor.data_ptr()
    return first, first + (extent + 1) * tensor.element_size()
