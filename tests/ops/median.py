"""median (kernels/median.py): values compared with torch's exactly (a median is one of
the elements), indices with the first element equal to the median (`median_reference`:
torch's CUDA kernel gives any equal one's); the interpreted check runs the runtime's
wrapper (aot/runtime/_median.py) on the CPU, its kernels under Triton's interpreter
(tests/ops/_runtime.py)."""

import math

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided

GROUPS = {"median": {"median": {}}}


def num_tensors(variant):
    return 3  # input, values, indices


def run(nt, variant, spec, dtype, bucket):
    """A row per program, laid out for the spec; small integers, so that rows hold ties."""
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    x.copy_(torch.randint(-3, 4, x.shape, device="cuda"))
    return nt.median(x, -1), median_reference(x, -1)


def check(result, reference, variant, dtype):
    exactly(result, reference)


def median_reference(input, dim=None, keepdim=False, *, out=None):
    """torch.median, its indices the first element equal (`==`) to each median, or the
    first NaN where the median is NaN: the index the wheel gives, one of those torch's
    CUDA kernel may give. torch's medians of a contiguous copy: its CPU kernel reads
    garbage along an expanded dim (torch 2.13: NaN or 0 for a float16 (1, 1) expanded
    to (16, 38), along dim 0)."""
    if dim is None:
        median = torch.median(input.contiguous())
        return median if out is None else out.copy_(median)
    values = torch.median(input.contiguous(), dim, keepdim).values
    if input.ndim == 0:
        indices = torch.zeros((), dtype=torch.int64, device=input.device)
    else:
        at = dim % input.ndim
        kept = values if keepdim else values.unsqueeze(at)
        equal = (input == kept) | (input.isnan() & kept.isnan())
        indices = equal.to(torch.int8).argmax(at, keepdim=keepdim)  # the first
    if out is not None:
        out[0].copy_(values)
        out[1].copy_(indices)
        values, indices = out
    return torch.return_types.median((values, indices))


def calls(name, dtype):
    """Forms the samples leave out: along a dim (a 0-dim input too), and out= of the
    median of every element."""

    def along(make):
        return (make((6, 42, 123), dtype), 1), {"keepdim": True}

    def whole(make):
        return (make((6, 42, 123), dtype),), {"out": make((), dtype)}

    return [
        Call(f"{name} along a dim", name, along, reference=median_reference),
        Call(f"{name} of a 0-dim input", name, lambda make: ((make((), dtype), 0), {})),
        Call(f"{name} out=", name, whole, reference=_median_into),
    ]


def _median_into(input, *, out):
    """The median of every element written into `out`: the wheel takes out= there too
    (torch.median only with a dim), as its declared samples' out= calls do."""
    return median_reference(input, out=out)


def fuzz_spec():
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, median_reference, FLOATS, names=("median",))


def _draw(d, op):
    """Any shape and layout, small integers now and then (ties everywhere); the whole
    tensor or a dim, keepdim or not."""
    from tests.gpu.fuzz_inputs import FLOATS

    dtype = d.principal(FLOATS)
    shape = d.shape()
    values = None
    if d.chance(0.3):
        values = torch.randint(-3, 3, shape, generator=d.generator).to(dtype)
    x = d.tensor(shape, dtype, values=values)
    if d.chance(0.3):
        return (x,), {}
    ndim = len(shape)
    dim = d.rng.randint(-ndim, ndim - 1) if ndim else d.pick((0, -1))
    return (x, dim), {"keepdim": True} if d.chance(0.4) else {}


def interpreted(make):
    """The wrapper and its kernel against torch on the CPU: ties (the first equal
    element's index, signed zeros equal), NaN, along each dim of a 3-dim tensor
    (moved last: views and copies), keepdim, every element, a 0-dim input, nothing,
    half types, out= in both forms, torch's refusal; then the kernel itself over rows
    of several tiles. (Few programs: each passes over its row 6 to 10 times, slowly in
    the interpreter.)"""
    from tests.ops._runtime import load

    nt = load(make, "_median", GROUPS)
    ties = torch.tensor([[2.0, 1.0, 2.0, 1.0, 2.0, 1.0], [0.0, -0.0, 0.0, -1.0, 1.0, -0.0]])
    for dim, keepdim in ((1, False), (0, True)):
        exactly(nt.median(ties, dim, keepdim), median_reference(ties, dim, keepdim))
    cube = torch.randn(2, 3, 4)
    cube[1, 2, 3] = math.nan
    for dim in (0, 1, -1):
        exactly(nt.median(cube, dim, True), median_reference(cube, dim, True))
    for whole in (cube, cube[0], ties, torch.tensor(2.5), torch.empty(0)):
        close(nt.median(whole), torch.median(whole))
    half = cube[0].to(torch.bfloat16)
    exactly(nt.median(half, 1), median_reference(half, 1))
    exactly(nt.median(torch.tensor(1.5), 0), median_reference(torch.tensor(1.5), 0))
    check_out(nt, cube)
    for function in (torch.median, nt.median):
        with pytest.raises(IndexError, match="Expected reduction dim 1 to have non-zero"):
            function(torch.empty(3, 0), 1)
    check_small_tiles(make)


def check_out(nt, cube):
    """out= as torch takes it (a tensor for the median of every element, (values,
    indices) along a dim), and a tensor along a dim (ntops.torch.median's values)."""
    total = torch.empty(())
    assert nt.median(cube[0], out=total) is total
    close(total, torch.median(cube[0]))
    values, indices = torch.empty(2, 4), torch.empty(2, 4, dtype=torch.int64)
    result = nt.median(cube, 1, out=(values, indices))
    assert result.values is values
    assert result.indices is indices
    exactly((values, indices), median_reference(cube, 1))
    assert nt.median(cube, 1, out=values).values is values


def check_small_tiles(make):
    """The kernel with tiles of 16 (the build's have 1024): rows of several tiles, the
    last partly past the row (padded with +inf), of distinct values, of ties across
    tiles, with a NaN in a later tile; float32 and a half type."""
    x = torch.randn(3, 41)
    x[1] = torch.randint(-2, 3, (41,)).float()
    x[2, 37] = math.nan
    for dtype, name in ((torch.float32, "fp32"), (torch.float16, "fp16")):
        y = x.to(dtype)
        values, indices = torch.empty(3, 1, dtype=dtype), torch.empty(3, 1, dtype=torch.int64)
        make("median", 2, name, block_size=16)(y, values, indices)
        exactly((values[:, 0], indices[:, 0]), median_reference(y, 1))


def exactly(result, reference):
    """(values, indices) equal to the reference's, NaN where it has NaN."""
    for got, want in zip(result, reference, strict=True):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def close(got, want):
    from tests.tolerances import tolerance

    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(want.dtype))
