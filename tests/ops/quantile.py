"""quantile (kernels/quantile.py): against torch's at the tests' tolerance (both take
torch's ranks and lerp in float32); the interpreted check runs the runtime's wrapper
(aot/runtime/_quantile.py) on the CPU, its kernel under Triton's interpreter
(tests/ops/_runtime.py)."""

import math

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided

GROUPS = {"quantile": {"quantile": {}}}
INTERPOLATIONS = ("linear", "lower", "higher", "nearest", "midpoint")


def num_tensors(variant):
    return 3  # input, q, values


def run(nt, variant, spec, dtype, bucket):
    """A row per program and quantile, laid out for the spec; three quantiles."""
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    q = torch.tensor([0.0, 0.37, 1.0], device="cuda")
    return nt.quantile(x, q, -1), torch.quantile(x, q, -1)


def calls(name, dtype):
    """Forms the samples leave out: q as a tensor, 1-D and 0-dim (the samples hold
    numbers: torch's CUDA quantile indexes out of bounds with a q outside [0, 1], and
    sample tensors hold normal values), with out=."""

    def vector(make):
        return (make((6, 40), dtype), make((3,), dtype)), {"dim": 1, "keepdim": True}

    def zero_dim(make):
        return (make((5, 7), dtype), make((), dtype)), {"dim": 0, "out": make((7,), dtype)}

    return [Call(f"{name} of a q tensor", name, vector), Call(f"{name} out=", name, zero_dim)]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, torch.quantile, (torch.float32,), names=("quantile",))


def _draw(d, op):
    """Any shape and layout, small integers now and then (ties everywhere); the whole
    tensor or a dim, keepdim or not; q a number or a tensor of [0, 1]; every
    interpolation."""
    dtype = d.principal((torch.float32,))
    shape = d.shape()
    values = None
    if d.chance(0.3):
        values = torch.randint(-3, 3, shape, generator=d.generator).to(dtype)
    x = d.tensor(shape, dtype, values=values)
    ndim = len(shape)
    dim = None
    if d.chance(0.7):
        dim = d.rng.randint(-ndim, ndim - 1) if ndim else d.pick((0, -1))
    kwargs = {"keepdim": True} if d.chance(0.4) else {}
    if d.chance(0.5):
        q = d.pick((0.0, 0.25, 0.5, 0.9, 1.0, d.rng.random()))
    else:
        count = d.pick((None, 1, 3, 6))
        fractions = torch.rand(() if count is None else (count,), generator=d.generator)
        q = d.tensor(fractions.shape, dtype, values=fractions.to(dtype), exotic=False)
    kwargs["interpolation"] = d.pick(INTERPOLATIONS)
    return (x, q, dim), kwargs


def interpreted(make):
    """The wrapper and its kernel against torch on the CPU: every interpolation; along
    each dim of a 3-dim tensor and of the whole tensor, q a number, a 0-dim and a 1-D
    tensor, keepdim; rows with a NaN; out=; torch's refusals; then the kernel itself
    over rows of several tiles, of distinct values and of ties. (Few programs: each
    passes over its row 10 times, slowly in the interpreter.)"""
    from tests.ops._runtime import load

    nt = load(make, "_quantile", GROUPS)
    rows = torch.randn(2, 7)
    q = torch.tensor([0.0, 0.3, 1.0])
    for interpolation in INTERPOLATIONS:
        got = nt.quantile(rows, q[1:], 1, interpolation=interpolation)
        close(got, torch.quantile(rows, q[1:], 1, interpolation=interpolation))
    cube = torch.randn(2, 2, 3)
    cube[1, 1, 2] = math.nan
    for args in ((q[1:], 1, True), (torch.tensor(0.61), None), (q, None, True), (0.5, 0)):
        got = nt.quantile(cube, *args, interpolation="midpoint")
        close(got, torch.quantile(cube, *args, interpolation="midpoint"))
    lower = torch.quantile(cube, 0.2, -1, interpolation="lower")
    close(nt.quantile(cube, 0.2, -1, False, "lower"), lower)  # ntops.torch's positional
    out = torch.empty(2, 3)
    assert nt.quantile(cube, 0.2, 0, out=out) is out
    close(out, torch.quantile(cube, 0.2, 0))
    check_refusals(nt, cube)
    check_small_tiles(make)


def check_refusals(nt, cube):
    """What torch refuses, refused in its words."""
    for args, kwargs, error in [
        ((cube, 1.5), {}, r"q must be in the range \[0, 1\]"),
        ((cube, torch.tensor([[0.5]])), {}, "q must be a scalar or 1D tensor"),
        ((cube.half(), 0.5), {}, "must be either float or double"),
        ((cube, torch.tensor([0.5], dtype=torch.float64)), {}, "same dtype"),
        ((cube, 0.5), {"interpolation": "cubic"}, "interpolation must be one of"),
        ((torch.empty(0), 0.5), {}, "must be non-empty"),
    ]:
        for function in (torch.quantile, nt.quantile):
            with pytest.raises(RuntimeError, match=error):
                function(*args, **kwargs)


def check_small_tiles(make):
    """The kernel with tiles of 16 (the build's have 1024): rows of several tiles, the
    last partly past the row (padded with +inf), of distinct values and of ties across
    tiles; linear quantiles (both values about a rank), q outside [0, 1] (NaN)."""
    kernel = make("quantile", 2, "fp32", block_size=16)
    x = torch.randn(2, 41)
    x[1] = torch.randint(-2, 3, (41,)).float()
    q = torch.tensor([0.13, 0.77, 1.5])
    values = torch.empty(3, 2)
    kernel(x, q, 0.0, 1, 0, values)
    close(values[:2], torch.quantile(x, q[:2], 1))
    assert values[2].isnan().all()


def close(got, want):
    from tests.tolerances import tolerance

    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(want.dtype))
