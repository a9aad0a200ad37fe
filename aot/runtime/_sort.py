"""sort, argsort, msort and topk over any dim (kernels/sort.py sorts the rows of a
2-dim view): `dim` is moved last and the other dims merged into rows, as views where
the layout allows, else through contiguous copies. The sort is stable whatever
`stable` says (equal elements keep their index order: torch's stable sort's indices),
NaN sorts after +inf, -0.0 with 0.0. Rows of up to LONGEST elements are sorted whole
in a tile; topk of longer rows selects its k first by a radix select and sorts them in
a tile of CANDIDATES. Sort of longer rows and topk of a larger k are refused, naming
the limit. Outputs are laid out as torch's (sort's as its input, topk's contiguous);
nothing waits on the GPU or allocates by value: calls capture in CUDA graphs."""

import torch

from . import _C
from . import _checks as check
from ._errors import NotBuiltError
from ._library import compiling, fake, implementation, routed, traced
from ._reductions import written, written_pair

_launch = _C.launch
# The kernels by the longest rows they sort whole ("64", "1024"), and "select" (topk
# of longer rows): kernels/sort.py's `tile` switch.
_TILES = check.groups("sort", "tile")
_WHOLE = sorted(int(tile) for (tile,) in _TILES if tile.isdigit())
LONGEST = _WHOLE[-1]
_SELECT = _TILES[("select",)]
# topk of long rows in two passes, where the rows are few (`_in_parts`): the first
# selects the k first of each part of PART elements (kernels/sort.py's "parts" tile), a
# program a part, the second the k first of those. One program a row ran a 128256-long
# row in 137-199 us against torch's 36-57 (H100, batch 1 and 8).
PART = 2048
_PARTS = _TILES[("parts",)]
# The most rows taken in parts. H100, 128256 logits, CUDA graphs, us, 256 rows in parts
# / a program a row (torch): bf16 k = 1 250.5 / 285.2 (304.1), k = 50 270.6 / 352.4
# (310.2), k = 1024 297.1 / 363.5 (327.2); fp32 k = 50 300.3 / 382.3 (471.3). Past 256
# rows not measured.
_PARTED_ROWS = 256
# The most rows whose candidates go through parts again. H100, bf16, k = 1024 of 128256,
# CUDA graphs, us: 1 row 102 -> 71.7 (torch 50.8), 8 rows 108 -> 81.9 (58.1), but 64
# rows 168 -> 192 (119.8): with many rows "select" over the candidates is the cheaper.
_AGAIN_ROWS = 8
# Parts grow while their candidates are more than this share of the row (`_part_size`),
# a smaller one where the candidates may go through parts again. H100, 128256 logits,
# CUDA graphs, us, parts at shares 2 / 4 / 8 / 16 (torch): bf16 k = 1024, 1 row 67.1 /
# 53.4 / 59.9 / 73.3 (49.8), 8 rows 76.7 / 63.6 / 72.3 / 90.2 (56.3), 64 rows 163.9 /
# 120.5 / 108.9 / 132.4 (115.0), 128 rows 228.5 / 182.6 / 169.0 / 185.9 (168.8); k = 256
# at most 3 us apart but for 16 (2-12 us faster from 1 to 128 rows, 38 slower at 32);
# k = 50 the same at every share. Parts of 2048 alone (the kernel before) took share 2's
# times.
_SHARE = 8
_SHARE_AGAIN = 4
# topk's largest k (kernels/sort.py's CANDIDATES).
CANDIDATES = 1024
_SOURCE = "kernels/sort.py"
# Offsets the kernels compute in 32 bits: a call past them runs in slices of rows.
_OFFSETS = 2**31 - 1


def _group(n):
    """The group that sorts rows of `n` elements (or selects from them)."""
    whole = next((size for size in _WHOLE if n <= size), None)
    return _SELECT if whole is None else _TILES[(str(whole),)]


def _sort_limit(op, n, dim):
    if n > LONGEST:
        raise NotBuiltError(
            f"ntops_prebuilt.{op}: dim {dim} has {n} elements; rows of up to {LONGEST} are "
            f"sorted (in one tile of registers, {_SOURCE}): longer rows need a merge across "
            "tiles, which is not built (torch.sort sorts them; topk selects from them)"
        )


def _topk_limit(n, k, dim):
    if not 0 <= k <= n:
        raise RuntimeError("selected index k out of range")
    if k > CANDIDATES:
        raise NotBuiltError(
            f"ntops_prebuilt.topk: k={k} of dim {dim}'s {n} elements; k up to {CANDIDATES} "
            f"is built (the k first are sorted in one tile of registers, {_SOURCE}): a "
            "larger k needs a merge across tiles, which is not built (torch.topk gives it)"
        )


def _checked(op, input, dim):
    """`dim` of `input` (0 for a 0-dim tensor, as torch takes -1 and 0 there), a plain
    tensor (a subclass goes to the op: `routed`)."""
    check.tensor(op, "input", input)
    return _dim(op, input, dim)


def _dim(op, input, dim):
    return check.dim(op, dim, max(input.ndim, 1))


def _flat(tensor):
    """`tensor` (its sorted dim last) as (rows, length), a view; None where its dims
    do not merge."""
    try:
        return tensor.view(-1, tensor.shape[-1])
    except RuntimeError:
        return None


def _rows(op, group, input, values, indices, dim, flag):
    """Launch `group` on the rows of `input` along `dim`, writing `values` and
    `indices` (their `dim` the result's length); `flag` is descending or largest."""
    if input.numel() == 0 or values.numel() == 0:
        return
    moved = [tensor.movedim(dim, -1) for tensor in (input, values, indices)]
    flat = [_flat(tensor) for tensor in moved]
    if None not in flat:
        _each(op, group, *flat, int(flag))
        return
    # Leading dims no view merges (a permuted tensor, a non-last dim of 3 or more):
    # the kernel reads a contiguous copy and writes contiguous rows, copied out.
    source = moved[0].reshape(-1, moved[0].shape[-1])
    rows = [torch.empty(out.shape, dtype=out.dtype, device=out.device) for out in moved[1:]]
    _each(op, group, source, *(_flat(row) for row in rows), int(flag))
    for out, row in zip(moved[1:], rows, strict=True):
        out.copy_(row)


def _each(op, group, input, values, indices, flag):
    """Launch `group` on 2-dim rows (`_sliced`), or topk's selection from long rows in
    two passes where the rows are few (`_in_parts`)."""
    size = _parted(input, values.shape[1]) if group == _SELECT else None
    if size:
        _in_parts(input, values, indices, flag, size)
    else:
        _sliced(op, group, input, values, indices, flag)


def _parted(input, k):
    """The parts' size where topk's `k` first of the 2-dim rows `input` are selected in
    parts (few rows, of 4 parts or more, whose candidates are half the row or fewer),
    else None."""
    rows, n = input.shape
    if rows > _PARTED_ROWS or n < 4 * PART or _offsets(input) > _OFFSETS:
        return None
    size = _part_size(rows, n, k)
    return size if (n // size) * k <= n // 2 else None


def _part_size(rows, n, k):
    """The parts' size of topk's first pass over `rows` rows of `n`: PART, doubled while
    the candidates they leave are more than a share of the row (_SHARE_AGAIN of it where
    they may go through parts again, else _SHARE) and 4 parts or more would remain
    (k = 1024 of 128256: 1 row in 31 parts of 4096, then 7 of 4096 over their
    candidates; 64 rows in 7 parts of 16384)."""
    share = _SHARE_AGAIN if rows <= _AGAIN_ROWS else _SHARE
    size = PART
    while (n // size) * k > n // share and n // (2 * size) >= 4:
        size *= 2
    return size


def _in_parts(input, values, indices, flag, size):
    """topk of 2-dim rows in passes: each part of `size` elements (`_parted`'s; the last
    one the rest too) gives its k first, in slots of its own of a row of candidates
    (kernels/sort.py's "parts"), then the k first of the candidates are selected
    (stably: of equal ones the first slot, which is the first index; in parts again
    where the candidates are half the row or fewer and still long) and their indices
    looked up in the parts' (a gather a pass). Every size comes from the shapes."""
    rows, n = input.shape
    k = values.shape[1]
    width = (n // size) * k
    candidates = torch.empty(rows, width, dtype=input.dtype, device=input.device)
    found = torch.empty(rows, width, dtype=torch.int64, device=input.device)
    _launch(_PARTS, input, candidates, found, flag, size)
    slots = torch.empty(rows, k, dtype=torch.int64, device=input.device)
    # The candidates in parts again where they are many and the rows very few (k = 1024
    # of 128256: 63488, then 31744 and 15360, "select" taking the 7168 left), else by a
    # tile or "select".
    again = _parted(candidates, k) if rows <= _AGAIN_ROWS else None
    if again:
        _in_parts(candidates, values, slots, flag, again)
    else:
        _sliced("topk", _group(width), candidates, values, slots, flag)
    torch.gather(found, 1, slots, out=indices)


def _offsets(tensor):
    """The largest element offset of a 2-dim tensor, in elements."""
    (rows, n), (row, column) = tensor.shape, tensor.stride()
    return (rows - 1) * abs(row) + (n - 1) * abs(column)


def _sliced(op, group, *args):
    """Launch on 2-dim `args` (tensors and the flag) in slices of rows whose offsets
    fit the kernels' 32 bits: the kernels have no 64-bit build (a launch per slice,
    as many as the shapes say)."""
    tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
    row = max(abs(tensor.stride(0)) for tensor in tensors)
    last = max((tensor.shape[1] - 1) * abs(tensor.stride(1)) for tensor in tensors)
    if last > _OFFSETS:
        raise NotBuiltError(
            f"ntops_prebuilt.{op}: a row spans 2^31 elements or more of memory; the "
            f"kernels index in 32 bits ({_SOURCE}): make the tensor contiguous"
        )
    step = (_OFFSETS - last) // max(row, 1) + 1
    count = tensors[0].shape[0]
    if step >= count:
        _launch(group, *args)
        return
    for start in range(0, count, step):
        _launch(group, *(_rows_of(arg, start, step) for arg in args))


def _rows_of(arg, start, step):
    return arg[start : start + step] if isinstance(arg, torch.Tensor) else arg


def _sorted(op, input, dim, descending):
    """(values, indices) of `input` sorted along `dim` (checked), as torch.sort's."""
    n = input.shape[dim] if input.ndim else 1
    _sort_limit(op, n, dim)
    values = torch.empty_like(input)
    indices = torch.empty_like(input, dtype=torch.int64)
    if input.ndim == 0:
        values.copy_(input)
        indices.zero_()
    else:
        _rows(op, _group(n), input, values, indices, dim, descending)
    return values, indices


@fake("sort")
def _sort_fake(input, dim=-1, descending=False, stable=False, *, out=None):
    dim = _dim("sort", input, dim)
    _sort_limit("sort", input.shape[dim] if input.ndim else 1, dim)
    return tuple(torch.sort(input, dim=dim, descending=descending, stable=stable))


@implementation("sort")
def _sort_op(input, dim=-1, descending=False, stable=False, *, out=None):
    """sort's op: (values, indices); its out= form (a tensor, the schema's) takes the
    values."""
    values, indices = _sorted("sort", input, _checked("sort", input, dim), descending)
    if out is not None:
        written("sort", out, values, cast=False)
    return values, indices


def sort(input, dim=-1, descending=False, stable=False, *, out=None):
    """torch.sort: (values, indices) of `input` sorted along `dim`, stable (`stable`
    is torch's parameter: the order is the stable one either way), as
    torch.return_types.sort. out= takes a (values, indices) pair (torch's and upstream
    ntops.torch.sort's form) or a tensor, the values, as max's; they are written and
    returned. The op returns both results always and takes a tensor out= (a pair is no
    schema's argument): the pair is written here (`implementation`)."""
    if compiling():
        return _traced_sort(input, dim, descending, stable, out)
    try:
        values, indices = _sorted("sort", input, _checked("sort", input, dim), descending)
    except _C.SubclassError:
        return _traced_sort(input, dim, descending, stable, out)
    return _sort_answer(values, indices, out)


def _traced_sort(input, dim, descending, stable, out):
    """A call while Dynamo traces, or on a tensor subclass: through sort's op."""
    values, indices = traced("sort")(input, dim, descending, stable)
    return _sort_answer(values, indices, out)


def _sort_answer(values, indices, out):
    """What torch.sort returns, written into `out` where given (see `sort`)."""
    if out is None:
        return torch.return_types.sort((values, indices))
    if isinstance(out, (tuple, list)):
        return torch.return_types.sort(written_pair("sort", out, values, indices))
    return torch.return_types.sort((written("sort", out, values, cast=False), indices))


@fake("argsort")
def _argsort_fake(input, dim=-1, descending=False, stable=False):
    dim = _dim("argsort", input, dim)
    _sort_limit("argsort", input.shape[dim] if input.ndim else 1, dim)
    return torch.argsort(input, dim=dim, descending=descending, stable=stable)


@routed("argsort")
def argsort(input, dim=-1, descending=False, stable=False):
    """torch.argsort: the indices that sort `input` along `dim`, stably (the kernel
    writes the sorted values too, into a tensor dropped here)."""
    return _sorted("argsort", input, _checked("argsort", input, dim), descending)[1]


@fake("msort")
def _msort_fake(input):
    _dim("msort", input, 0)
    _sort_limit("msort", input.shape[0] if input.ndim else 1, 0)
    return torch.msort(input)


@routed("msort")
def msort(input):
    """torch.msort: `input` sorted along its first dim."""
    return _sorted("msort", input, _checked("msort", input, 0), False)[0]


@fake("topk")
def _topk_fake(input, k, dim=-1, largest=True, sorted=True):
    dim = _dim("topk", input, dim)
    _topk_limit(input.shape[dim] if input.ndim else 1, k, dim)
    return tuple(torch.topk(input, k, dim=dim, largest=largest, sorted=sorted))


@routed("topk")
def _topk(input, k, dim=-1, largest=True, sorted=True):
    dim = _checked("topk", input, dim)
    n = input.shape[dim] if input.ndim else 1
    _topk_limit(n, k, dim)
    shape = [k if axis == dim else size for axis, size in enumerate(input.shape)]
    values = torch.empty(shape, dtype=input.dtype, device=input.device)
    indices = torch.empty(shape, dtype=torch.int64, device=input.device)
    if input.ndim == 0:
        values.copy_(input)
        indices.zero_()
    else:
        _rows("topk", _group(n), input, values, indices, dim, largest)
    return values, indices


def topk(input, k, dim=-1, largest=True, sorted=True):
    """torch.topk: the `k` largest (smallest, with `largest=False`) elements of
    `input` along `dim` and their indices, sorted (`sorted=False` gets them sorted
    too); equal elements in index order, the first of a tie at the k-th kept."""
    return torch.return_types.topk(_topk(input, k, dim, largest, sorted))
