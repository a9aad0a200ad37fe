"""mean and logsumexp (kernels/sums.py, one kernel): against torch at the tests'
tolerances (both sum in fp32 and round once; torch's log-sum-exp of half types rounds
between its steps, within them); the interpreted check runs the runtime's wrapper
(aot/runtime/_sums.py) on the CPU, its kernels under Triton's interpreter
(tests/ops/_runtime.py)."""

import math

import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided

GROUPS = {
    "sums": {
        f"sums-result={result}-layout={layout}": {"result": result, "layout": layout}
        for result in ("same", "fp32")
        for layout in ("rows", "columns")
    }
}


def num_tensors(variant):
    return 2  # input, output


def run(nt, variant, spec, dtype, bucket):
    """A row per program, of one chunk at most: the spec's kernel is the call's one
    launch; log-sum-exp on the kernels of the input's dtype, the mean in float32 of a
    half type on its "fp32" ones. Layout "columns": the rows side by side (a transposed
    tensor, its unit dim the rows' dim 0)."""
    shape = spec_shape(variant["ndim"], spec)
    wide, unit = spec.width == 64, spec.unit[0]
    if variant["switches"]["layout"] == "columns":
        flipped = None if unit is None else 1 - unit
        x = strided(shape, dtype, unit=flipped, aligned=spec.aligned, wide=wide).t()
    else:
        x = strided(shape, dtype, unit=unit, aligned=spec.aligned, wide=wide)
    if variant["switches"]["result"] == "fp32":
        return nt.mean(x, -1, dtype=torch.float32), torch.mean(x, -1, dtype=torch.float32)
    return nt.logsumexp(x, -1), torch.logsumexp(x, -1)


def mean_reference(input, dim=None, keepdim=False, *, dtype=None, out=None):
    """torch.mean, with ntops.torch.mean's float32 for integer and bool inputs."""
    if dtype is None and not input.dtype.is_floating_point:
        dtype = torch.float32
    return torch.mean(input, dim, keepdim, dtype=dtype, out=out)


def calls(name, dtype):
    """Forms the samples leave out: a dim as a tuple, a 0-dim input, and for mean an
    integer input (float32, as ntops.torch.mean gives) and float32 out of a half type."""
    found = [
        Call(f"{name} dims as a tuple", name, lambda make: ((make((4, 5, 6), dtype), (0, -1)), {})),
        Call(f"{name} of a 0-dim input", name, lambda make: ((make((), dtype), 0), {})),
    ]
    if name == "mean":

        def integers(make):
            return (make((4, 6), torch.int32),), {"dim": 1}

        found.append(Call(f"{name} of integers", name, integers, reference=mean_reference))
    return found


def fuzz_specs():
    """mean's and logsumexp's (one kernel serves both)."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    return {
        "mean": Spec(_draw, mean_reference, FLOATS, kernel="sums", names=("sums", "mean")),
        "logsumexp": Spec(_draw, torch.logsumexp, FLOATS, kernel="sums", names=("sums",)),
    }


def _draw(d, op):
    """Any shape and layout, rows of a vocabulary's length now and then; the dims an
    int, a tuple or a list of some (mean: or none, every dim), keepdim or not; mean in
    another dtype now and then; out= now and then."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import _out

    dtype = d.principal(FLOATS)
    shape = (d.rng.randint(1, 3), 128256) if d.chance(0.03) else d.shape()
    x = d.tensor(shape, dtype, specials="finite-range" if op == "mean" else "all")
    ndim = len(shape)
    dims = [at for at in range(ndim) if d.chance(0.4)] or [d.rng.randint(0, max(ndim, 1) - 1)]
    dims = [at - ndim if d.chance(0.3) else at for at in dims]
    dim = (
        d.pick((dims[0], tuple(dims), list(dims)))
        if len(dims) == 1
        else d.pick((tuple(dims), dims))
    )
    kwargs = {"keepdim": True} if d.chance(0.4) else {}
    if op == "mean" and d.chance(0.2):
        dim = None
    if op == "mean" and d.chance(0.2):
        kwargs["dtype"] = d.pick((torch.float32, torch.float16, torch.bfloat16))
    if d.chance(0.25):
        result = (mean_reference if op == "mean" else torch.logsumexp)(
            torch.empty(shape, dtype=dtype, device="meta"), dim, **kwargs
        )
        kwargs.update(_out(d, [x], result.shape, result.dtype, in_place=False))
    return (x, dim), kwargs


def interpreted(make):
    """The wrapper and its kernels against torch on the CPU: rows of one chunk and of
    many (their fp32 results reduced by a second launch), a row of -inf, +inf, NaN and
    +inf with NaN; a vocabulary's row of 128256; over each dim and several of a 3-dim
    tensor, keepdim, the whole tensor; half types (the mean of a half type in float32
    read as it is), integers (float32), out=."""
    from tests.ops._runtime import load

    nt = load(make, "_sums", GROUPS)
    x = torch.randn(6, 20000) * 4
    x[1] = -math.inf
    x[2, 19000] = math.inf
    x[3, 5] = math.nan
    x[4, 7], x[4, 9000] = math.inf, math.nan
    x[5, :15000] = -math.inf  # the first chunks' results -inf
    close(nt.logsumexp(x, 1), torch.logsumexp(x, 1))
    close(nt.mean(x, 1), torch.mean(x, 1))
    logits = torch.randn(2, 128256, dtype=torch.bfloat16) * 3
    wanted = torch.logsumexp(logits.float(), -1).bfloat16()  # rounded once, as ours
    close(nt.logsumexp(logits, -1), wanted)
    cube = torch.randn(3, 5, 7)  # few rows: the interpreter takes a while over each
    for dim in (0, 1, 2, (0, 2), [-1, 0, 1]):
        for keepdim in (False, True):
            close(nt.logsumexp(cube, dim, keepdim), torch.logsumexp(cube, dim, keepdim))
            close(nt.mean(cube, dim, keepdim), torch.mean(cube, dim, keepdim))
    close(nt.mean(cube), torch.mean(cube))
    close(nt.mean(cube, None, True), torch.mean(cube, None, True))
    half = cube.half()
    close(nt.mean(half, 1), torch.mean(half.float(), 1).half())
    close(nt.mean(half, 1, dtype=torch.float32), torch.mean(half, 1, dtype=torch.float32))
    close(nt.mean(half), torch.mean(half.float()).half())
    long = torch.randn(40000, dtype=torch.float16)  # fp32 results of 5 chunks, reduced
    close(nt.mean(long), torch.mean(long.float()).half())
    close(nt.mean(torch.arange(12).view(3, 4), 1), torch.arange(12).view(3, 4).float().mean(1))
    close(
        nt.logsumexp(torch.arange(12).view(3, 4), 1),
        torch.logsumexp(torch.arange(12).view(3, 4), 1),
    )
    out = torch.empty(5, dtype=torch.float64)
    assert nt.mean(cube, (0, 2), out=out) is out
    close(out.float(), torch.mean(cube, (0, 2)))  # written in float64, computed in float32
    empty = torch.empty(3, 0)
    close(nt.mean(empty, 1), torch.mean(empty, 1))
    close(nt.logsumexp(empty, 1), torch.logsumexp(empty, 1))
    check_columns(nt)
    check_small_tiles(make)


def check_columns(nt):
    """Leading dims reduced: rows side by side, layout "columns" (blocks of 64 rows,
    chunks of 256 of their elements): 70 rows (a block and part of one) of 1100 (5
    chunks, whose fp32 results a second launch of that layout reduces), a row of -inf,
    +inf, NaN, +inf with NaN, and one whose first chunks are -inf; every other row of
    those; the leading two dims of a 3-dim tensor; half types (the mean in float32
    read as it is)."""
    from ntops_prebuilt._reductions import as_rows, layout

    x = torch.randn(1100, 70) * 4
    x[:, 1] = -math.inf
    x[900, 2] = math.inf
    x[5, 3] = math.nan
    x[7, 4], x[1000, 4] = math.inf, math.nan
    x[:600, 5] = -math.inf
    assert layout(as_rows(x, (0,))) == "columns"
    assert layout(torch.empty(5, 3).t()) == "columns"
    for rows in (torch.empty(3, 5), torch.empty(1, 5).expand(3, 5), torch.empty(5, 1).t()):
        assert layout(rows) == "rows", rows.stride()  # adjacent elements, or one row
    close(nt.logsumexp(x, 0), torch.logsumexp(x, 0))
    close(nt.mean(x, 0), torch.mean(x, 0))
    close(nt.mean(x, 0, True), torch.mean(x, 0, True))
    sliced = x[:, 1::2]  # rows 2 apart, their elements 70
    assert layout(as_rows(sliced, (0,))) == "columns"
    close(nt.logsumexp(sliced, 0), torch.logsumexp(sliced, 0))
    cube = torch.randn(20, 3, 50)
    assert layout(as_rows(cube, (0, 1))) == "columns"
    close(nt.mean(cube, (0, 1)), torch.mean(cube, (0, 1)))
    close(nt.logsumexp(cube, [0, 1]), torch.logsumexp(cube, [0, 1]))
    for dtype in (torch.float16, torch.bfloat16):
        half = (torch.randn(300, 70) * 4).to(dtype)
        close(nt.mean(half, 0), torch.mean(half.float(), 0).to(dtype))
        close(nt.mean(half, 0, dtype=torch.float32), torch.mean(half, 0, dtype=torch.float32))
        close(nt.logsumexp(half, 0), torch.logsumexp(half.float(), 0).to(dtype))


def check_small_tiles(make):
    """The kernel with chunks of several tiles (3 of 64 here; the build's have one), a
    last tile partly past the row: log-sum-exp through the rescaling of its running sum
    (the maximum growing from tile to tile, +inf, -inf first), and the mean."""
    kernel = make("sums", 2, "fp32", block_size=64, blocks=3)
    x = torch.randn(4, 150) * 10
    x[0] = torch.linspace(-50, 50, 150)  # the maximum grows with every tile
    x[1, 100] = math.inf
    x[2, :70] = -math.inf
    out = torch.empty(4, 1)
    kernel(x, 1.0, 1, out)
    close(out.flatten(), torch.logsumexp(x, 1))
    kernel(x, 1 / 150, 0, out)
    close(out.flatten(), torch.mean(x, 1))


def close(got, want):
    """At the tests' tolerance for the result's dtype (tests/tolerances.py), NaN and
    infinities where torch has them."""
    from tests.tolerances import tolerance

    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(want.dtype))
