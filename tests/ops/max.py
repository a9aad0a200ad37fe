"""max and argmax (kernels/max.py): values compared with torch's exactly (a maximum is
one of the elements), indices too (the first of equal maxima, the first NaN); the
interpreted check runs the runtime's wrapper (aot/runtime/_max.py) on the CPU, its
kernels under Triton's interpreter (tests/ops/_runtime.py)."""

import math

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided
from tests.ops.sums import GROUPS as SUMS_GROUPS

GROUPS = {
    "max": {f"max-layout={kind}": {"layout": kind} for kind in ("rows", "columns")},
    **SUMS_GROUPS,  # max(input)'s value alone: the sums kernel's largest value
}
INTERPRETED_OPS = ("max", "sums")


def num_tensors(variant):
    return 4  # input, positions, values, indices


def run(nt, variant, spec, dtype, bucket):
    """A row per program, its length one chunk at most: the kernel of the spec is the
    call's one launch. Layout "columns": the rows side by side (a transposed tensor,
    its unit dim the rows' dim 0)."""
    shape = spec_shape(variant["ndim"], spec)
    wide, unit = spec.width == 64, spec.unit[0]
    if variant["switches"]["layout"] == "columns":  # rows side by side: transposed
        flipped = None if unit is None else 1 - unit
        x = strided(shape, dtype, unit=flipped, aligned=spec.aligned, wide=wide).t()
    else:
        x = strided(shape, dtype, unit=unit, aligned=spec.aligned, wide=wide)
    x[0, 1] = x[0, 0] = x[0].max() + 1  # a tie: the first
    return nt.max(x, -1), torch.max(x, -1)


def check(result, reference, variant, dtype):
    exactly(result, reference)


def exactly(result, reference):
    """(values, indices) equal to torch's, NaN where it has NaN."""
    assert isinstance(result, tuple), type(result)
    for got, want in zip(result, reference, strict=True):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def calls(name, dtype):
    """Forms the samples leave out: a 0-dim input; max's out= (torch's of the largest
    element: the out= overload; its tuple of values and indices reaches no overload,
    and is test_ops's), and argmax of the whole tensor with keepdim (every dim kept, of
    size 1)."""
    if name == "argmax":
        return [
            Call(f"{name} keepdim", name, lambda make: ((make((5, 7), dtype),), {"keepdim": True}))
        ]

    def whole(make):
        return (make((6, 42, 123), dtype),), {"out": make((), dtype)}

    return [
        Call(f"{name} out=", name, whole),
        Call(f"{name} of a 0-dim input", name, lambda make: ((make((), dtype), 0), {})),
    ]


def fuzz_specs():
    """max's and argmax's (one kernel serves both)."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    return {
        "max": Spec(_draw, torch.max, FLOATS, names=("max",)),
        "argmax": Spec(_draw, torch.argmax, FLOATS, kernel="max", names=("max",)),
    }


def _draw(d, op):
    """Any shape and layout, now and then small integers (ties everywhere) or rows of
    a vocabulary's length; the whole tensor, or a dim with keepdim or not; max's out=
    now and then (the largest element's, or torch's (values, indices))."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import _out

    dtype = d.principal(FLOATS)
    shape = (d.rng.randint(1, 3), 128256) if d.chance(0.03) else d.shape()
    values = None
    if d.chance(0.3):
        values = torch.randint(-3, 3, shape, generator=d.generator).to(dtype)
    x = d.tensor(shape, dtype, values=values)
    if d.chance(0.25):  # the whole tensor
        if op == "argmax":
            return (x,), {"keepdim": True} if d.chance(0.3) else {}
        return (x,), _out(d, [x], (), dtype, in_place=False) if d.chance(0.3) else {}
    ndim = len(shape)
    dim = d.rng.randint(-ndim, ndim - 1) if ndim else d.pick((0, -1))
    keepdim = d.chance(0.4)
    kwargs = {"keepdim": True} if keepdim else {}
    if op == "max" and d.chance(0.3):
        at = dim % ndim if ndim else None
        kept = [1 if i == at else size for i, size in enumerate(shape) if keepdim or i != at]
        pair = [_out(d, [x], kept, kind, in_place=False) for kind in (dtype, torch.int64)]
        if all(pair):
            kwargs["out"] = tuple(one["out"] for one in pair)
    return (x, dim), kwargs


def interpreted(make):
    """The wrapper and its kernels against torch on the CPU: ties (everywhere, and
    across chunks and their second launch), NaN (the first, beside +inf), rows of -inf
    and of one value, -0.0 before +0.0, a vocabulary's rows of 128256 (16 chunks of
    8192), along each dim of a 3-dim tensor (moved last: views and copies), keepdim,
    the whole tensor (its index flattened), half types, out= in both forms. (Few rows:
    the interpreter takes a while over each program's 8192 elements.)"""
    from tests.ops._runtime import load

    nt = load(make, "_max", GROUPS)
    x = torch.randint(-3, 3, (5, 9000)).float()
    x[1, 4000], x[1, 8500] = 7.0, 7.0  # equal maxima in two chunks
    x[2, 6000], x[2, 100], x[2, 7000] = math.inf, math.nan, math.nan
    x[3] = -math.inf
    x[4] = 2.5
    exactly(nt.max(x, 1), torch.max(x, 1))
    assert torch.equal(nt.argmax(x, -1), torch.argmax(x, -1))
    columns = x[:, 3990:4010].t()  # rows of 5 along dim 0, 20 apart in memory
    exactly(nt.max(columns, 0), torch.max(columns, 0))
    signed = torch.tensor([[-0.0, 0.0, -1.0], [0.0, -0.0, -1.0]])
    exactly(nt.max(signed, 1), torch.max(signed, 1))
    assert torch.equal(nt.max(signed, 1).values.signbit(), torch.tensor([True, False]))
    logits = torch.randn(2, 128256, dtype=torch.bfloat16)
    logits[1, 128255] = 9.0
    logits[1, 70000] = 9.0
    assert torch.equal(nt.argmax(logits, -1), torch.argmax(logits, -1))
    assert torch.equal(nt.argmax(logits), torch.argmax(logits))
    assert torch.equal(nt.max(logits), torch.max(logits))
    # The whole tensor's value alone (the sums kernel's largest value): a NaN anywhere,
    # -inf everywhere, half types through fp32 chunk results, a 0-dim tensor.
    assert torch.equal(nt.max(x[3:]), torch.max(x[3:]))
    assert nt.max(x).isnan()
    assert nt.max(x[3]) == -math.inf
    assert torch.equal(nt.max(logits[1].half()), torch.max(logits[1].half()))
    assert torch.equal(nt.max(torch.tensor(-2.5)), torch.tensor(-2.5))
    cube = torch.randint(-4, 4, (3, 5, 7)).to(torch.float16)
    for dim, keepdim in ((0, False), (1, True), (2, False), (-2, False)):
        exactly(nt.max(cube, dim, keepdim), torch.max(cube, dim, keepdim))
        want = torch.argmax(cube, dim, keepdim)
        assert torch.equal(nt.argmax(cube, dim, keepdim), want), (dim, keepdim)
    view = cube.transpose(0, 2)[:, ::2]  # a permuted, sliced view
    exactly(nt.max(view, 1), torch.max(view, 1))
    assert torch.equal(nt.argmax(cube, keepdim=True), torch.argmax(cube, keepdim=True))
    scalar = torch.tensor(3.5)
    exactly(nt.max(scalar, 0), torch.max(scalar, 0))
    check_out(nt, cube)
    check_columns(nt)
    check_small_tiles(make)


def check_columns(nt):
    """Leading dims reduced: rows side by side, layout "columns" (blocks of 64 rows,
    chunks of 256 of their elements): 70 rows (a block and part of one) of 1100 (5
    chunks, a second launch gathering their indices), ties everywhere and across
    chunks, NaN beside +inf, a row of -inf, one of one value, -0.0 before +0.0; every
    other row of those; the leading dim of a 3-dim tensor; half types."""
    from ntops_prebuilt._reductions import as_rows, layout

    x = torch.randint(-3, 3, (1100, 70)).float()
    x[:, 1] = -math.inf
    x[900, 2], x[100, 2], x[700, 2] = math.inf, math.nan, math.nan
    x[:, 3] = 2.5
    x[300, 4], x[1000, 4] = 7.0, 7.0
    x[:, 5] = -1.0
    x[10, 5], x[20, 5] = -0.0, 0.0
    assert layout(as_rows(x, (0,))) == "columns"
    exactly(nt.max(x, 0), torch.max(x, 0))
    assert nt.max(x, 0).values[5].signbit()
    exactly(nt.max(x, 0, True), torch.max(x, 0, True))
    assert torch.equal(nt.argmax(x, 0), torch.argmax(x, 0))
    sliced = x[:, ::2]  # rows 2 apart, their elements 70
    assert layout(as_rows(sliced, (0,))) == "columns"
    exactly(nt.max(sliced, 0), torch.max(sliced, 0))
    cube = torch.randint(-4, 4, (20, 3, 50)).float()
    assert layout(as_rows(cube, (0,))) == "columns"
    exactly(nt.max(cube, 0), torch.max(cube, 0))
    for dtype in (torch.float16, torch.bfloat16):
        half = torch.randint(-4, 4, (300, 70)).to(dtype)
        exactly(nt.max(half, 0), torch.max(half, 0))
        assert torch.equal(nt.argmax(half, 0), torch.argmax(half, 0))


def check_small_tiles(make):
    """The kernel with chunks of several tiles (4 of 64 here; the build's have one):
    equal maxima in one lane of two tiles, in two lanes, NaN after +inf, rows of -inf,
    a last tile partly past the row; then its second launch over the chunks' results."""
    kernel = make("max", 2, "fp32", block_size=64, blocks=4)
    x = torch.randint(-3, 3, (5, 600)).float()
    x[0, 69], x[0, 5] = 9.0, 9.0  # lane 5 of tiles 1 and 0
    x[1, 300], x[1, 290] = 9.0, 9.0
    x[2, 10], x[2, 400], x[2, 500] = math.inf, math.nan, math.nan
    x[3] = -math.inf
    positions = torch.empty((), dtype=torch.int64).expand(5, 600)
    values, indices = torch.empty(5, 3), torch.empty(5, 3, dtype=torch.int64)
    kernel(x, positions, 0, values, indices)
    for chunk in range(3):
        part = x[:, chunk * 256 : (chunk + 1) * 256]
        want = torch.max(part, 1)
        exactly((values[:, chunk], indices[:, chunk] - chunk * 256), want)
    final = torch.empty(5, 1), torch.empty(5, 1, dtype=torch.int64)
    kernel(values, indices, 1, *final)
    exactly(tuple(one.flatten() for one in final), torch.max(x, 1))


def check_out(nt, cube):
    """out= as torch takes it ((values, indices) with a dim, a tensor without), and as
    ntops.torch.max takes it (the values' tensor, with a dim)."""
    values, indices = torch.empty(3, 7, dtype=cube.dtype), torch.empty(3, 7, dtype=torch.int64)
    result = nt.max(cube, 1, out=(values, indices))
    assert result.values is values
    assert result.indices is indices
    exactly((values, indices), torch.max(cube, 1))
    total = torch.empty((), dtype=cube.dtype)
    assert nt.max(cube, out=total) is total
    assert torch.equal(total, torch.max(cube))
    taken = nt.max(cube, 1, out=values)
    assert taken[0] is values
    exactly(taken, torch.max(cube, 1))
    with pytest.raises(TypeError, match=r"out must be torch\.int64"):
        nt.max(cube, 1, out=(values, indices.float()))
