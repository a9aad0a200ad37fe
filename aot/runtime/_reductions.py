"""What the reductions share (max and argmax, mean and logsumexp): their kernels reduce
the last dim of 2-dim rows in chunks (kernels/_lib/chunks.py), so the reduced dims are
moved last and the others merged into rows, and a row longer than a chunk takes a
second launch over the chunks' results. Rows that lie side by side (reduced along
leading dims) take the kernels of layout "columns", a block of rows a program."""

import functools
import math

import torch

from . import _checks as check
from ._manifest import manifest


def reduced_dims(op, dim, ndim):
    """`dim` (None: every dim; an int, or a list or tuple of them) as sorted distinct
    dims of an `ndim`-dim tensor, torch's way: negative dims count from the end, a
    0-dim tensor takes dims 0 and -1, and a dim given twice is refused."""
    if dim is None:
        return tuple(range(ndim))
    given = [dim] if isinstance(dim, int) else list(dim)
    found = [check.dim(op, one, max(ndim, 1)) for one in given]
    for one in set(found):
        if found.count(one) > 1:
            raise RuntimeError(f"{op}: dim {one} appears multiple times in the list of dims")
    return tuple(sorted(found)) if ndim else ()


def as_rows(input, reduced):
    """`input` as (rows, n): its other dims, in order, merged into rows and its
    `reduced` ones into each row; a view where the strides allow it (the last dims, or
    the leading ones: rows side by side, see `layout`), else a contiguous copy."""
    kept = [d for d in range(input.ndim) if d not in reduced]
    order = kept + list(reduced)
    moved = input if order == list(range(input.ndim)) else input.permute(order)
    rows = math.prod(input.shape[d] for d in kept)
    return moved.reshape(rows, math.prod(input.shape[d] for d in reduced))


def layout(rows):
    """The kernels' switch `layout` for (rows, n) `rows`: "columns" where rows lie
    closer together than a row's elements, which are not adjacent (a reduction along
    leading dims: mean of a (4096, 4096) along dim 0 gives rows of stride 1 whose
    elements lie 4096 apart), so that a program reads a block of rows side by side, a
    line at a time; "rows" otherwise. Through a row a program at a time, each element
    of such a row is a sector read of its own (H200, mean of a bf16 (4096, 4096) along
    dim 0: 113 us, torch 17 us)."""
    count, n = rows.shape
    if count == 1 or n == 1 or rows.stride(1) == 1:
        return "rows"
    return "columns" if rows.stride(0) < rows.stride(1) else "rows"


def chunk_results(count, parts, dtype, kind, device):
    """(count, parts) results of `count` rows' chunks, for the next launch to read as
    rows: side by side (stride 1 along dim 0) for layout "columns", as its rows are."""
    if kind == "columns":
        return torch.empty(parts, count, dtype=dtype, device=device).t()
    return torch.empty(count, parts, dtype=dtype, device=device)


def result_shape(shape, reduced, keepdim):
    """The shape of a reduction of a tensor of `shape` over `reduced` dims."""
    if keepdim:
        return tuple(1 if d in reduced else size for d, size in enumerate(shape))
    return tuple(size for d, size in enumerate(shape) if d not in reduced)


@functools.cache
def chunk_size(op, **switches):
    """The elements of one chunk of op `op`'s kernels (those of `switches`' values), as
    the build made them (their variants' configurations in the manifest): one for all
    of them, or the results would be sized for a kernel that is not the one launched.
    1 where none is built (the launch then says what the wheel lacks)."""
    sizes = _built(op, lambda premake: premake["block_size"] * premake.get("blocks", 1), switches)
    return _one(op, "chunks of", sizes, 1)


@functools.cache
def built_value(op, name, **switches):
    """The value of premake argument `name` of op `op`'s kernels (those of `switches`'
    values) as the build made them: one for all of them (as `chunk_size`); None where
    none is built."""
    return _one(op, name, _built(op, lambda premake: premake[name], switches), None)


def _built(op, value, switches):
    """`value` of each premake configuration op `op`'s kernels of `switches` were built
    with (the manifest's), as a set."""
    return {
        value(bucket["config"]["premake"])
        for variant in manifest()["variants"]
        if variant["op"] == op
        and all(variant["switches"].get(key) == wanted for key, wanted in switches.items())
        for bucket in variant["buckets"].values()
    }


def _one(op, what, values, default):
    """The one value of `values`, `default` where there is none; several are an error:
    the runtime sizes its buffers by one (the kernel file's CONFIG)."""
    if len(values) > 1:
        raise RuntimeError(
            f"{op}: this wheel's kernels were built with {what} {sorted(values)}; the "
            "runtime sizes its buffers by one (its kernel file's CONFIG)"
        )
    return values.pop() if values else default


def chunks(n, size):
    """How many chunks of `size` a row of `n` elements has."""
    return -(-n // size)


def written_pair(op, out, values, indices):
    """(values, indices) written into a caller's out=(values, indices), torch's out= of
    functions with two results (max, sort); returns out's two tensors."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{op}: out must be a (values, indices) pair, not {type(out).__name__}")
    return written(op, out[0], values, cast=False), written(op, out[1], indices, cast=False)


def written(op, out, result, *, cast):
    """`result` written into a caller's `out` of its shape and device (torch's out=), of
    its dtype or, where `cast`, of any floating dtype (torch's mean and logsumexp write
    into those); returns `out`."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: out must be a tensor, not {type(out).__name__}")
    if tuple(out.shape) != tuple(result.shape):
        raise ValueError(
            f"{op}: out has shape {list(out.shape)}, but the result has shape {list(result.shape)}"
        )
    if out.dtype != result.dtype and not (cast and out.dtype.is_floating_point):
        raise TypeError(f"{op}: out must be {result.dtype}, not {out.dtype}")
    if out.device != result.device:
        raise RuntimeError(f"{op}: out is on {out.device}, the result on {result.device}")
    return out.copy_(result)
