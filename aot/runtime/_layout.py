"""The layout functions, stack, select_copy, rot90 and diag: each a copy through
kernels/strided_copy.py with its own index map. Views give most of the maps (a slice of
the result, the selected slice, a transpose, a matrix's diagonal); what no view can say,
a flipped dim and the zeros around a vector's diagonal, the kernel's signed strides and
band do. Nothing here reads a tensor's values: no host synchronisation.

Results are laid out as torch lays out its own (contiguous; stack's after its inputs'
layout, rot90's as its flips and transposes leave them), and written in their memory
order."""

import itertools
import operator

import torch

from . import _C
from . import _checks as check
from ._library import increment_versions, routed

_launch = _C.launch
_COPY = check.groups("strided_copy")[()]
# The kernels' element types, by element size: a copy moves bits (kernels/strided_copy.py).
_WIDTHS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_DIMS = 4  # the kernel's output dims


@routed("stack")
def stack(tensors, dim=0, *, out=None):
    """torch.stack: the tensors, of one shape, dtype and device, along a new dim `dim`;
    one launch per tensor, each into its slice of the result. Tensors of two dtypes are
    refused where torch would promote them (convert them first: a silent conversion
    would hide a copy)."""
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"stack: tensors must be a list or tuple of tensors, not {type(tensors)}")
    if not tensors:
        raise ValueError("stack: expects a non-empty list of tensors")
    first = check.tensor("stack", "tensors[0]", tensors[0])
    for index, tensor in enumerate(tensors):
        _alike(index, check.tensor("stack", f"tensors[{index}]", tensor), first)
    at = check.dim("stack", dim, first.ndim + 1)
    shape = (*first.shape[:at], len(tensors), *first.shape[at:])
    dense = all(tensor.is_contiguous() for tensor in tensors)
    result = _result("stack", out, shape, first, None if dense else _stacked(tensors, at))
    for index, tensor in enumerate(tensors):
        _copy("stack", result.select(at, index), tensor)
    return result


def _stacked(tensors, at):
    """The result of stacking tensors of other layouts than contiguous, laid out as
    torch's is (a cat of the tensors unsqueezed, which may follow channels-last
    inputs): as torch's meta kernels, which torch.compile's fake tensors run, give it."""
    first = tensors[0]

    def allocate():
        metas = [
            torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in tensors
        ]
        strides = torch.stack(metas, at).stride()
        shape = (*first.shape[:at], len(tensors), *first.shape[at:])
        return torch.empty_strided(shape, strides, dtype=first.dtype, device=first.device)

    return allocate


def _alike(index, tensor, first):
    """Tensor `index` of stack's of the first's shape, dtype and device, in torch's words."""
    if tensor.shape != first.shape:
        raise ValueError(
            f"stack: expects each tensor to be equal size, but got {list(first.shape)} at "
            f"entry 0 and {list(tensor.shape)} at entry {index}"
        )
    if tensor.dtype != first.dtype:
        raise TypeError(
            f"stack: tensors[0] is {first.dtype} and tensors[{index}] {tensor.dtype}, which "
            f"torch would promote: convert them to one dtype first (e.g. .to({first.dtype}))"
        )
    if tensor.device != first.device:
        raise RuntimeError(
            f"stack: tensors[0] is on {first.device} and tensors[{index}] on {tensor.device}"
        )


@routed("select_copy")
def select_copy(input, dim, index, *, out=None):
    """torch.select_copy: the slice at `index` of dim `dim` (negative ones count from
    the end), as a new tensor (a contiguous one, as torch's)."""
    check.tensor("select_copy", "input", input)
    if input.ndim == 0:
        raise IndexError("select_copy: cannot be applied to a 0-dim tensor")
    at = check.dim("select_copy", dim, input.ndim)
    index, size = operator.index(index), input.shape[at]
    if not -size <= index < size:
        raise IndexError(
            f"select_copy: index {index} out of range for tensor of size "
            f"{list(input.shape)} at dimension {at}"
        )
    view = input.select(at, index)
    result = _result("select_copy", out, view.shape, input)
    _copy("select_copy", result, view)
    return result


@routed("rot90")
def rot90(input, k=1, dims=[0, 1], *, out=None):  # noqa: B006 (torch's default, never written)
    """torch.rot90: `input` turned by 90 degrees `k` times in the plane of `dims`, from
    dims[0] towards dims[1]; one launch. The result is laid out as torch's: a turn by
    180 degrees like the input (torch.empty_like), by 90 or 270 that layout transposed
    in `dims`, by 0 a contiguous copy."""
    check.tensor("rot90", "input", input)
    first, second = _plane(input.ndim, list(dims))
    turns = operator.index(k) % 4
    if turns == 0:
        result = _result("rot90", out, input.shape, input)
        _copy("rot90", result, input)
        return result
    if turns == 2:
        result = _result("rot90", out, input.shape, input, lambda: torch.empty_like(input))
        _copy("rot90", result, input, flips=(first, second))
        return result
    # out[.., i at first, .., j at second, ..] is input's element at (j, n - 1 - i) of
    # (first, second) for a quarter turn, (n - 1 - j, i) for three: the transposed
    # input with one of its dims read backwards.
    view = input.transpose(first, second)
    shape = view.shape

    def allocate():
        return torch.empty_like(input).transpose(first, second)

    result = _result("rot90", out, shape, input, allocate)
    _copy("rot90", result, view, flips=(first if turns == 1 else second,))
    return result


def _plane(ndim, dims):
    """rot90's two dims, checked as torch checks them (and in its order)."""
    if len(dims) != 2:
        raise ValueError(f"rot90: expected total rotation dims == 2, but got dims = {len(dims)}")
    if ndim < 2:
        raise ValueError(f"rot90: expected total dims >= 2, but got total dims = {ndim}")
    if dims[0] == dims[1] or abs(dims[0] - dims[1]) == ndim:
        raise ValueError(
            f"rot90: expected rotation dims to be different, but got dim0 = {dims[0]} and "
            f"dim1 = {dims[1]}"
        )
    return check.dim("rot90", dims[0], ndim), check.dim("rot90", dims[1], ndim)


@routed("diag")
def diag(input, diagonal=0, *, out=None):
    """torch.diag: of a vector, the square matrix with it on diagonal `diagonal` (above
    the main one where positive) and zeros elsewhere, in one launch; of a matrix, that
    diagonal as a vector (empty where it lies outside)."""
    check.tensor("diag", "input", input)
    diagonal = operator.index(diagonal)
    if input.ndim == 2:
        view = input.diagonal(diagonal)
        result = _result("diag", out, view.shape, input)
        _copy("diag", result, view)
        return result
    if input.ndim != 1:
        raise ValueError(
            f"diag: expected a 1-D or 2-D tensor, not {input.ndim}-D (torch.diag_embed and "
            "torch.diagonal take more dims)"
        )
    size = input.shape[0] + abs(diagonal)
    result = _result("diag", out, (size, size), input)
    input = _readable(input)
    # Element (i, i + diagonal) is input[i] above the main diagonal, (j - diagonal, j)
    # is input[j] below it: the vector's stride along the rows, or along the columns.
    step = input.stride(0)
    strides = (step, 0) if diagonal >= 0 else (0, step)
    gather("diag", result, input, strides, diagonal=diagonal)
    return result


def _result(op, out, shape, like, allocate=None):
    """The tensor a function writes: `out`, checked to be of the result's shape and of
    `like`'s dtype and device; else a new one (`allocate()`, by default contiguous)."""
    if out is None:
        if allocate is not None:
            return allocate()
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    check.tensor(op, "out", out)
    if out.requires_grad and torch.is_grad_enabled():  # written through a view that does not
        raise RuntimeError(
            f"{op}: functions with out=... arguments don't support automatic "
            "differentiation, but out requires grad"
        )
    if tuple(out.shape) != tuple(shape):
        raise ValueError(
            f"{op}: out has shape {list(out.shape)}, but the result has shape {list(shape)}"
        )
    if out.dtype != like.dtype:
        raise TypeError(f"{op}: out must be {like.dtype}, not {out.dtype}")
    if out.device != like.device:
        raise RuntimeError(f"{op}: out is on {out.device}, the input on {like.device}")
    return out


def _copy(op, out, view, flips=()):
    """out = view (of one shape), the dims `flips` of view read backwards: from their
    last element, at negative strides."""
    view = _readable(view)
    strides = [-stride if d in flips else stride for d, stride in enumerate(view.stride())]
    start = sum((view.shape[d] - 1) * view.stride(d) for d in flips)
    gather(op, out, view, strides, start)


def gather(op, out, source, strides, start=0, diagonal=None):
    """out[index] = the element of `source` at `start` plus the sum of index times
    `strides` (in elements, from source's first one: strides may be negative); with
    `diagonal`, only on that diagonal of out's last two dims, and zeros elsewhere. One
    launch; one per index of the leading dims where more than four remain after
    merging (a permuted view of five dims or more)."""
    if out.numel() == 0:
        increment_versions((out,))  # as torch's out= and the launcher's writes of nothing
        return
    data, target = _bits(op, "input", source), _bits(op, "out", out)
    extent = 1 + sum((n - 1) * s for n, s in zip(source.shape, source.stride(), strict=True))
    span = data.as_strided((extent if source.numel() else 0,), (1,), data.storage_offset())
    dims = _dims(out.shape, out.stride(), strides, banded=diagonal is not None)
    band = (0, 0) if diagonal is None else (diagonal, 1)
    leading, inner = dims[:-_DIMS], dims[-_DIMS:]
    sizes, out_strides, in_strides = zip(*inner, strict=True)
    for index in itertools.product(*(range(size) for size, _, _ in leading)):
        at = sum(i * out_stride for i, (_, out_stride, _) in zip(index, leading, strict=True))
        shift = sum(i * stride for i, (_, _, stride) in zip(index, leading, strict=True))
        part = target.as_strided(sizes, out_strides, target.storage_offset() + at)
        _launch(_COPY, part, span, start + shift, *in_strides, *band)


def _readable(tensor):
    """`tensor`, or where it is a negated or conjugated view (its memory holds other
    values than its own), a copy of its values."""
    return tensor.resolve_conj().resolve_neg() if tensor.is_conj() or tensor.is_neg() else tensor


def _bits(op, name, tensor):
    """`tensor` as the integer type of its element size (a view). A negated or
    conjugated output is refused: its memory would hold other values than written."""
    if tensor.is_conj() or tensor.is_neg():
        raise ValueError(
            f"{op}: {name} is a conjugated or negated view; pass a tensor that owns its "
            "values (e.g. .resolve_conj() or .resolve_neg() of it)"
        )
    width = _WIDTHS.get(tensor.element_size())
    if width is None:
        raise TypeError(
            f"{op}: {name} is {tensor.dtype}, of {tensor.element_size()}-byte elements; the "
            "kernels copy elements of 1, 2, 4 or 8 bytes (view complex128 as float64 pairs "
            "with torch.view_as_real)"
        )
    return tensor.view(width)


def _dims(shape, out_strides, strides, banded):
    """(size, out's stride, source's stride) per dim, at least four, padded in front:
    in out's memory order (writes in order), size-1 dims dropped, and neighbours
    contiguous in both merged (a flipped dim only with a flipped one: both strides
    negative). A banded copy keeps its dims: the band is between the last two."""
    dims = list(zip(shape, out_strides, strides, strict=True))
    if not banded:
        dims = sorted((dim for dim in dims if dim[0] != 1), key=lambda dim: -dim[1])
        merged = []
        for size, out_stride, stride in dims:
            last = merged[-1] if merged else None
            if last and last[1] == out_stride * size and last[2] == stride * size:
                merged[-1] = (last[0] * size, out_stride, stride)
            else:
                merged.append((size, out_stride, stride))
        dims = merged
    return [(1, 0, 0)] * (_DIMS - len(dims)) + dims
