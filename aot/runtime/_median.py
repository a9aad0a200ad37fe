"""median along a dim or over the whole tensor: kernels/median.py selects each row's
lower median (the reduced dim moved last, the others merged into rows, as
`_reductions` lays rows out), without a sort.

median has two forms of result, a 0-dim tensor without `dim` and (values, indices)
with one; its op returns both always (`implementation`), as max's does. Where equal
elements hold the median, its index is the first of them (torch's CUDA kernel gives
whichever thread's write lands last); in a row with a NaN, the value is NaN and the
index the first NaN's. Without `dim` the median is torch's (of every element), not
ntops.torch.median's default of the last dim: the two cannot both hold, and calls
that name their dim (upstream's tests') mean the same in both.
"""

import math

import torch

from . import _C
from . import _checks as check
from ._library import compiling, fake, implementation, traced
from ._reductions import as_rows, result_shape, written

_launch = _C.launch
_MEDIAN = check.groups("median")[()]


def _median(input, dim, keepdim):
    """(values, indices) of the median along `dim` (None: of every element, its index
    into the tensor flattened), of torch's shapes."""
    check.tensor("median", "input", input)
    if dim is None:
        if input.numel() == 0:  # torch's median of nothing
            nan = torch.full((), math.nan, dtype=input.dtype, device=input.device)
            return nan, torch.zeros((), dtype=torch.int64, device=input.device)
        rows, shape = input.reshape(1, -1), ()
    else:
        at = check.dim("median", dim, input.ndim or 1)  # a 0-dim tensor takes dims 0 and -1
        reduced = (at,) if input.ndim else ()
        if reduced and input.shape[at] == 0:
            raise IndexError(f"median(): Expected reduction dim {at} to have non-zero size.")
        rows = as_rows(input, reduced)
        shape = result_shape(input.shape, reduced, keepdim)
    values = torch.empty(rows.shape[0], 1, dtype=rows.dtype, device=rows.device)
    indices = torch.empty(rows.shape[0], 1, dtype=torch.int64, device=rows.device)
    _launch(_MEDIAN, rows, values, indices)
    return values.view(shape), indices.view(shape)


@implementation("median")
def _median_op(input, dim=None, keepdim=False, *, out=None):
    """median's op: (values, indices) with or without `dim`; out= takes the values."""
    values, indices = _median(input, dim, keepdim)
    if out is not None:
        written("median", out, values, cast=False)
    return values, indices


@fake("median")
def _median_fake(input, dim=None, keepdim=False, *, out=None):
    if dim is None:
        return torch.median(input), torch.empty((), dtype=torch.int64, device=input.device)
    values, indices = torch.median(input, dim, keepdim)
    return values, indices


def median(input, dim=None, keepdim=False, *, out=None):
    """torch.median: the lower median of every element (a 0-dim tensor) without `dim`;
    with it, the lower medians along `dim` and an index of each (the first element
    equal to it), as torch.return_types.median. A row holding a NaN has the median NaN
    (the first NaN's index). out= takes a tensor (the median, or with `dim` the values,
    as ntops.torch.median takes it) or with `dim` a (values, indices) pair."""
    if compiling():
        return _traced(input, dim, keepdim, out)
    try:
        values, indices = _median(input, dim, keepdim)
    except _C.SubclassError:
        return _traced(input, dim, keepdim, out)
    return _answer(dim, values, indices, out)


def _traced(input, dim, keepdim, out):
    """A call while Dynamo traces, or on a tensor subclass: through median's op."""
    if dim is None and out is not None:
        return traced("median")(input, dim, keepdim, out=out)
    values, indices = traced("median")(input, dim, keepdim)
    return _answer(dim, values, indices, out)


def _answer(dim, values, indices, out):
    """What torch.median returns, written into `out` where given (see `median`)."""
    if dim is None:
        return values if out is None else written("median", out, values, cast=False)
    if out is None:
        return torch.return_types.median((values, indices))
    if isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise TypeError(f"median: out must be a tensor or (values, indices), not {len(out)}")
        values = written("median", out[0], values, cast=False)
        indices = written("median", out[1], indices, cast=False)
        return torch.return_types.median((values, indices))
    return torch.return_types.median((written("median", out, values, cast=False), indices))
