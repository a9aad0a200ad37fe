"""mean and logsumexp over any dims: kernels/sums.py reduces the last dim of rows
(`_reductions`) in fp32 and rounds once, as torch's CUDA kernels do; a row longer
than a chunk leaves fp32 results per chunk, which a second launch reduces. Rows side
by side (leading dims reduced) take the kernels of layout "columns", whose results per
chunk are laid out side by side again."""

import math

import torch

from . import _C
from . import _checks as check
from ._library import fake, routed
from ._reductions import (
    as_rows,
    chunk_results,
    chunk_size,
    chunks,
    layout,
    reduced_dims,
    result_shape,
    written,
)

_launch = _C.launch
_SUMS = check.groups("sums", "result", "layout")
# Kernels that write the input's dtype, and half types' that write fp32, by layout.
_SAME = {kind: _SUMS[("same", kind)] for kind in ("rows", "columns")}
_FP32 = {kind: _SUMS[("fp32", kind)] for kind in ("rows", "columns")}
_HALVES = (torch.float16, torch.bfloat16)
# The kernel's `function` constant.
_MEAN, _LOGSUMEXP, _LARGEST = 0, 1, 2


def _every(op, dim, ndim):
    """The reduced dims: every dim where `dim` is None or empty (torch's mean; its
    logsumexp fails on an empty list, meaning the same)."""
    empty = isinstance(dim, (tuple, list)) and len(dim) == 0
    return reduced_dims(op, None if empty else dim, ndim)


def _reduced(input, reduced, keepdim, dtype, function):
    """`function` (_MEAN, _LOGSUMEXP) of `input` over dims `reduced`, in `dtype`: the
    input is converted first, as torch does, except half types to fp32, whose kernels
    read them as they are."""
    shape = result_shape(input.shape, reduced, keepdim)
    source = input
    if input.dtype != dtype and not (input.dtype in _HALVES and dtype == torch.float32):
        source = input.to(dtype)
    rows = as_rows(source, reduced)
    count, n = rows.shape
    if n == 0:  # torch's mean of nothing is NaN, its log-sum-exp -inf (log 0)
        filler = math.nan if function == _MEAN else -math.inf
        return torch.full(shape, filler, dtype=dtype, device=input.device)
    scale = 1.0 / n
    while True:  # results per chunk, in fp32, reduced again
        kind = layout(rows)
        parts = chunks(rows.shape[1], chunk_size("sums", layout=kind))
        if parts == 1:
            break
        partial = chunk_results(count, parts, torch.float32, kind, rows.device)
        _launch((_FP32 if rows.dtype in _HALVES else _SAME)[kind], rows, scale, function, partial)
        rows, scale = partial, 1.0
    direct = rows.dtype == dtype or (rows.dtype in _HALVES and dtype == torch.float32)
    result = torch.empty(shape, dtype=dtype if direct else torch.float32, device=input.device)
    group = (_SAME if rows.dtype == result.dtype else _FP32)[kind]
    _launch(group, rows, scale, function, result.view(count, 1))
    return result if direct else result.to(dtype)


@routed("mean")
def mean(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """torch.mean over every dim (None) or `dim` (an int, or a list or tuple of them),
    in `dtype` (the input converted first, as torch does); half types summed in fp32
    and rounded once. Integer and bool inputs give float32, as ntops.torch.mean's
    (torch refuses them)."""
    check.tensor("mean", "input", input)
    if dtype is None:
        dtype = input.dtype if input.dtype.is_floating_point else torch.float32
    reduced = _every("mean", dim, input.ndim)
    result = _reduced(input, reduced, keepdim, dtype, _MEAN)
    return result if out is None else written("mean", out, result, cast=True)


@fake("mean")
def _mean_fake(input, dim=None, keepdim=False, *, dtype=None, out=None):
    if dtype is None and not input.dtype.is_floating_point:
        dtype = torch.float32
    return torch.mean(input, dim, keepdim, dtype=dtype)


def largest(input):
    """max(input): the largest element of a non-empty floating `input` (NaN the
    largest), a 0-dim tensor, without the index max's own kernels find with it (H100,
    bf16 (4096, 4096): 18-20 us through them, torch 17)."""
    return _reduced(input, tuple(range(input.ndim)), False, input.dtype, _LARGEST)


@routed("logsumexp")
def logsumexp(input, dim, keepdim=False, *, out=None):
    """torch.logsumexp over `dim` (an int, or a list or tuple of them): log(sum(exp(x)))
    with the maximum subtracted first; rows of -inf give -inf, a +inf +inf, a NaN
    NaN. Integer and bool inputs give float32, as torch's."""
    check.tensor("logsumexp", "input", input)
    dtype = input.dtype if input.dtype.is_floating_point else torch.float32
    reduced = _every("logsumexp", dim, input.ndim)
    result = _reduced(input, reduced, keepdim, dtype, _LOGSUMEXP)
    return result if out is None else written("logsumexp", out, result, cast=True)


@fake("logsumexp")
def _logsumexp_fake(input, dim, keepdim=False, *, out=None):
    empty = isinstance(dim, (tuple, list)) and len(dim) == 0
    return torch.logsumexp(input, list(range(input.ndim)) if empty else dim, keepdim)
