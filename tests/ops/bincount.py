"""bincount (kernels/bincount.py): counts compared with torch's exactly, sums of weights
at the tests' tolerance for their dtype (atomic adds sum in any order, as torch's CUDA
kernel's do); the interpreted check runs the runtime's wrapper (aot/runtime/_bincount.py)
on the CPU, its kernels under Triton's interpreter (tests/ops/_runtime.py)."""

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import strided

GROUPS = {
    "bincount": {f"bincount-weights={kind}": {"weights": kind} for kind in ("none", "fp32", "fp64")}
}


def num_tensors(variant):
    given = variant["switches"]["weights"] != "none"
    return 3 + given  # input, weights?, extrema, output


def run(nt, variant, spec, dtype, bucket):
    """Values below `minlength` (the call's one launch), in the spec's layout (wide: two
    values 2^31 elements apart), weighed in the switch's dtype."""
    wide = spec.width == 64
    x = strided((300,), dtype, unit=spec.unit[0], aligned=spec.aligned, wide=wide)
    x.copy_(torch.randint(0, 90, x.shape, device="cuda"))
    kind = {"none": None, "fp32": torch.float32, "fp64": torch.float64}
    kind = kind[variant["switches"]["weights"]]
    weights = None if kind is None else torch.randn(x.shape, device="cuda", dtype=kind)
    return nt.bincount(x, weights, 100), torch.bincount(x, weights, 100)


def calls(name, dtype):
    """Forms the samples leave out: weights converted to float64 (half types), and an
    empty input (int64 zeros of minlength, weights or not)."""

    def halves(make):
        values = make((50,), torch.int64, bound=20)
        return (values,), {"weights": make((50,), torch.float16), "minlength": 10}

    def empty(make):
        return (make((0,), torch.int32),), {"weights": make((0,), torch.float32), "minlength": 7}

    return [
        Call(f"{name} of half weights", name, halves),
        Call(f"{name} of nothing", name, empty, reference=_nothing),
    ]


def _nothing(input, weights=None, minlength=0):
    """torch's answer for an empty input, int64 zeros of minlength, weights or not
    (its fake tensors refuse every bincount: the length is the values' to say; the
    wheel's fake knows it for an empty input)."""
    return torch.zeros(minlength, dtype=torch.int64, device=input.device)


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, torch.bincount, (torch.int32, torch.int64), names=("bincount",))


def _draw(d, op):
    """A 1-D tensor of small non-negative values (now and then large ones, a negative
    one or no values), in any layout; weights now and then, of any float dtype;
    minlength past the values, below them, or none."""
    from tests.gpu.fuzz_inputs import FLOATS, INTEGERS

    dtype = d.principal((torch.int32, torch.int64))
    size = d.size()
    integral = dtype in INTEGERS
    high = d.pick((8, 64, 300, 5000)) if integral else 8
    values = torch.randint(0, high, (size,), generator=d.generator).to(dtype)
    if integral and size and d.chance(0.05):
        values[d.rng.randrange(size)] = -1
        d.note("a negative value")
    x = d.tensor((size,), dtype, values=values)
    kwargs = {}
    if d.chance(0.4):
        kwargs["weights"] = d.tensor((size,), d.pick((*FLOATS, torch.float64)))
    if d.chance(0.6):
        kwargs["minlength"] = d.pick((0, 1, high // 2, high, high + 17))
    return (x,), kwargs


def interpreted(make):
    """The wrapper and its kernel against torch on the CPU: counts over several
    programs, with minlength covering the values (one launch), short of them (a second
    launch into the longer output) and absent; values in a strided view; float32 and
    float64 weights, half and integer ones (float64, as torch's); int8, int16, uint8
    inputs (converted) and int64 ones; nothing; and torch's refusals."""
    from tests.ops._runtime import load

    nt = load(make, "_bincount", GROUPS)
    x = torch.randint(0, 64, (5000,), dtype=torch.int32)
    x[17] = 70  # past minlength=64: counted by the second launch
    for minlength in (0, 1, 64, 71, 200):
        exactly(nt.bincount(x, minlength=minlength), torch.bincount(x, minlength=minlength))
    view = torch.randint(0, 9, (2000,), dtype=torch.int64)[::3]
    exactly(nt.bincount(view), torch.bincount(view))
    exactly(nt.bincount(torch.zeros(3, dtype=torch.int64)), torch.bincount(torch.zeros(3).long()))
    large = torch.tensor([100000, 3, 3], dtype=torch.int64)
    exactly(nt.bincount(large), torch.bincount(large))
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32):
        weights = (torch.randn(5000) * 3).to(dtype)
        close(nt.bincount(x, weights), torch.bincount(x, weights))
        close(nt.bincount(x, weights, 100), torch.bincount(x, weights, 100))
    for dtype in (torch.int8, torch.int16, torch.uint8):
        small = torch.randint(0, 100, (300,)).to(dtype)
        exactly(nt.bincount(small, minlength=3), torch.bincount(small, minlength=3))
    for weights in (None, torch.empty(0)):
        nothing = torch.empty(0, dtype=torch.int32)
        exactly(nt.bincount(nothing, weights, 5), torch.bincount(nothing, weights, 5))
    check_refusals(nt, x)


def check_refusals(nt, x):
    """What torch refuses, refused in its words: a negative value (found by the read),
    2-D and float inputs, a negative minlength, weights of another length."""
    negative = x.clone()
    negative[4000] = -3
    for bad, error in [
        ((negative,), "non-negative integral"),
        ((x.view(50, 100),), "non-negative integral"),
        ((x.float(),), "not implemented for 'Float'"),
        ((x, None, -1), "minlength should be >= 0"),
        ((x, torch.ones(7)), "same length as input"),
    ]:
        with pytest.raises((RuntimeError, NotImplementedError), match=error):
            torch.bincount(*bad)
        with pytest.raises((RuntimeError, NotImplementedError), match=error):
            nt.bincount(*bad)


def exactly(got, want):
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    assert torch.equal(got, want)


def close(got, want):
    from tests.tolerances import tolerance

    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    torch.testing.assert_close(got, want, **tolerance(want.dtype))
