"""max and argmax along any dim, or over the whole tensor: kernels/max.py reduces the
last dim of rows (`_reductions`), each row's largest value and the index of its first
occurrence, NaN the largest, as torch's CUDA kernels give them.

max has two forms of result, a tensor without `dim` and (values, indices) with one,
and a torch.library op one schema: its op returns both always (`implementation`), and
`max` takes what torch's would return from it, `torch.return_types.max` with `dim`."""

import torch

from . import _C
from . import _checks as check
from ._library import compiling, fake, implementation, routed, traced
from ._reductions import (
    as_rows,
    chunk_results,
    chunk_size,
    chunks,
    layout,
    result_shape,
    written,
    written_pair,
)
from ._sums import largest

_launch = _C.launch
_MAX = {kind: check.groups("max", "layout")[(kind,)] for kind in ("rows", "columns")}


def _largest(op, input, dim, keepdim):
    """(values, indices) of `input`'s largest elements along `dim` (None: of the whole
    tensor, its index into the tensor flattened), of torch's shapes."""
    if dim is None:
        rows = _whole(op, input).reshape(1, -1)
        shape = (1,) * input.ndim if keepdim and op == "argmax" else ()
    else:
        check.tensor(op, "input", input)
        at = check.dim(op, dim, input.ndim or 1)  # a 0-dim tensor takes dims 0 and -1
        reduced = (at,) if input.ndim else ()
        if reduced and input.shape[reduced[0]] == 0:
            raise IndexError(f"{op}(): Expected reduction dim {reduced[0]} to have non-zero size.")
        rows = as_rows(input, reduced)
        shape = result_shape(input.shape, reduced, keepdim)
    values, indices = _rows(rows)
    return values.view(shape), indices.view(shape)


def _whole(op, input):
    """`input`, checked for a reduction over all of it, which needs an element."""
    check.tensor(op, "input", input)
    if input.numel() == 0:
        raise (RuntimeError if op == "max" else IndexError)(
            f"{op}(): Expected reduction dim to be specified for input.numel() == 0."
        )
    return input


def _rows(rows):
    """Each row's largest value and its index, (rows, 1) each: one launch over rows of
    up to a chunk, else one over their chunks and one over the chunks' results (the
    same kernel, reading the indices it left: `gather`), and so on while those span
    more than a chunk. Rows side by side take the kernels of layout "columns", whose
    results are laid out side by side again."""
    count, n = rows.shape
    # Positions are counted, not read, until the kernel gathers: a stand-in, stride 0.
    positions = torch.empty((), dtype=torch.int64, device=rows.device).expand(count, n)
    gather = 0
    while True:
        kind = layout(rows)
        parts = chunks(n, chunk_size("max", layout=kind))
        values = chunk_results(count, parts, rows.dtype, kind, rows.device)
        indices = chunk_results(count, parts, torch.int64, kind, rows.device)
        _launch(_MAX[kind], rows, positions, gather, values, indices)
        if parts == 1:
            return values, indices
        rows, positions, gather, n = values, indices, 1, parts


@implementation("max")
def _max_op(input, dim=None, keepdim=False, *, out=None):
    """max's op: (values, indices) with or without `dim` (then of the largest element
    and its index into the tensor flattened); out= takes the values."""
    values, indices = _largest("max", input, dim, keepdim)
    if out is not None:
        written("max", out, values, cast=False)
    return values, indices


@fake("max")
def _max_fake(input, dim=None, keepdim=False, *, out=None):
    if dim is None:
        return torch.max(input), torch.argmax(input)
    values, indices = torch.max(input, dim, keepdim)
    return values, indices


def max(input, dim=None, keepdim=False, *, out=None):
    """torch.max: the largest element (a 0-dim tensor) without `dim`; with it, the
    largest values along `dim` and the index of each one's first occurrence, as
    torch.return_types.max. NaN is the largest (the first NaN's index). out= takes a
    tensor, the largest element or, with `dim`, the values (ntops.torch.max's form),
    or with `dim` a (values, indices) pair (torch's)."""
    if compiling():
        return _traced(input, dim, keepdim, out)
    try:
        if dim is None:  # the value alone: the sums kernels' largest value, no index
            values, indices = largest(_whole("max", input)), None
        else:
            values, indices = _largest("max", input, dim, keepdim)
    except _C.SubclassError:
        return _traced(input, dim, keepdim, out)
    return _answer(dim, values, indices, out)


def _traced(input, dim, keepdim, out):
    """A call while Dynamo traces, or on a tensor subclass: through max's op."""
    if dim is None and out is not None:
        return traced("max")(input, dim, keepdim, out=out)
    values, indices = traced("max")(input, dim, keepdim)
    return _answer(dim, values, indices, out)


def _answer(dim, values, indices, out):
    """What torch.max returns, written into `out` where given (see `max`)."""
    if dim is None:
        return values if out is None else written("max", out, values, cast=False)
    if out is None:
        return torch.return_types.max((values, indices))
    if isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise TypeError(f"max: out must be a tensor or (values, indices), not {len(out)}")
        if out[0].stride() != out[1].stride():  # as torch refuses them
            raise RuntimeError(
                f"max: out's values and indices must have the same strides, not "
                f"{list(out[0].stride())} and {list(out[1].stride())}"
            )
        return torch.return_types.max(written_pair("max", out, values, indices))
    return torch.return_types.max((written("max", out, values, cast=False), indices))


@routed("argmax")
def argmax(input, dim=None, keepdim=False):
    """torch.argmax: the index of the first largest element along `dim`, or (None) into
    the tensor flattened; NaN is the largest. int64."""
    return _largest("argmax", input, dim, keepdim)[1]
