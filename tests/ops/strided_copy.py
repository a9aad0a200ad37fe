"""stack, select_copy, rot90 and diag (kernels/strided_copy.py, one kernel): copies, so
compared with torch bit for bit (NaN payloads and signed zeros included) in every
dtype, the kernels being per element width; the interpreted check runs the runtime
(aot/runtime/_layout.py) on the CPU, its launches under Triton's interpreter
(tests/ops/_runtime.py)."""

import itertools
import math

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided

GROUPS = {"strided_copy": {"strided_copy": {}}}
FUNCTIONS = ("stack", "select_copy", "rot90", "diag")
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def num_tensors(variant):
    return 2  # output, input (the source's span)


def run(nt, variant, spec, dtype, bucket):
    """A quarter turn of a 4-dim tensor whose dims cannot merge (its spec's layout; a
    wide one 2^31 elements between its two outermost entries): one launch of the 4-dim
    kernel, one of its dims read backwards."""
    x = strided(spec_shape(4, spec), dtype, unit=None, aligned=False, wide=spec.width == 64)
    return nt.rot90(x, 1, [1, 3]), torch.rot90(x, 1, [1, 3])


def check(result, reference, variant, dtype):
    same(result, reference)


def same(result, reference):
    """Of torch's dtype and shape, and its bits."""
    assert (result.dtype, result.shape) == (reference.dtype, reference.shape), (result, reference)
    width = _BITS[reference.element_size()]
    assert torch.equal(result.view(width), reference.view(width))


def calls(name, dtype):
    """Forms the samples leave out: stack of a tuple and of 0-dim tensors into out=,
    select_copy's index as an int-like, rot90's dims as a tuple and of a permuted view,
    diag of an empty vector off the main diagonal."""
    if name == "stack":
        return [Call("stack of a tuple", name, lambda make: (((make((4, 5), dtype),) * 3, 1), {}))]
    if name == "select_copy":
        return [
            Call("select_copy dim=-2", name, lambda make: ((make((4, 5, 6), dtype), -2, 4), {}))
        ]
    if name == "rot90":

        def permuted(make):
            x = make((4, 5, 6), dtype, strides=(1, 24, 4))
            return (x, 3, (2, 0)), {}

        return [Call("rot90 of a permuted view", name, permuted)]
    return [Call("diag of an empty vector", name, lambda make: ((make((0,), dtype), -3), {}))]


def fuzz_specs():
    """One spec per function, their calls in any dtype (the kernels serve every dtype of
    their widths), their tensors in any layout (permuted, sliced, expanded, negative)."""
    from tests.gpu.fuzz_ops import Spec

    built = (torch.int8, torch.int16, torch.int32, torch.int64)
    draws = {"stack": _stack, "select_copy": _select, "rot90": _rot90, "diag": _diag}
    references = {name: getattr(torch, name) for name in FUNCTIONS}
    return {
        name: Spec(draws[name], references[name], built, names=("strided_copy",))
        for name in FUNCTIONS
    }


def _dtype(d):
    from tests.gpu.fuzz_inputs import DTYPES

    return d.principal(DTYPES)


def _stack(d, op):
    """One to four tensors of one shape; now and then another dtype among them (torch
    promotes, ours refuses) or another shape (both refuse); out= one time in three."""
    from tests.gpu.fuzz_inputs import DTYPES
    from tests.gpu.fuzz_ops import _out

    dtype, shape = _dtype(d), d.shape(high=4)
    tensors = [d.tensor(shape, dtype) for _ in range(d.rng.randint(1, 4))]
    if d.chance(0.05):
        other = d.pick(DTYPES)
        if other != dtype:
            d.out_of_space(f"stack of {dtype} and {other} (torch promotes)")
        tensors.append(d.tensor(shape, other))
    if d.chance(0.03):
        tensors.append(d.tensor((*shape, 2), dtype))
    dim = d.rng.randint(-len(shape) - 1, len(shape)) if d.chance(0.97) else len(shape) + 1
    result = (*shape[: dim % (len(shape) + 1)], len(tensors), *shape[dim % (len(shape) + 1) :])
    kwargs = _out(d, tensors, result, dtype, in_place=False) if d.chance(0.3) else {}
    container = tuple if d.chance(0.3) else list
    return (container(tensors), dim), kwargs


def _select(d, op):
    from tests.gpu.fuzz_ops import _out

    shape = d.shape(low=1)
    x = d.tensor(shape, _dtype(d))
    dim = d.rng.randint(-len(shape), len(shape) - 1)
    size = shape[dim]
    index = d.rng.randint(-size, size - 1) if size and d.chance(0.97) else size
    kept = tuple(n for at, n in enumerate(shape) if at != dim % len(shape))
    kwargs = _out(d, [x], kept, d.dtype, in_place=False) if d.chance(0.3) else {}
    return (x, dim, index), kwargs


def _rot90(d, op):
    """Any k (negative, past 4), two dims of 2 to 5, now and then one dim twice."""
    shape = d.shape(low=2)
    x = d.tensor(shape, _dtype(d))
    ndim = len(shape)
    dims = [d.rng.randint(-ndim, ndim - 1) for _ in range(2)]
    if dims[0] % ndim == dims[1] % ndim and d.chance(0.9):
        dims[1] = (dims[0] + 1) % ndim
    k = d.rng.randint(-6, 9)
    return (x,), {"k": k, "dims": dims} if d.chance(0.8) else {"k": k}


def _diag(d, op):
    """A vector (its matrix) or a matrix (a diagonal), any diagonal up to past its end;
    now and then a tensor of other dims (both refuse); out= one time in four."""
    from tests.gpu.fuzz_ops import _out

    ndim = d.pick((1, 1, 2, 2, 2)) if d.chance(0.97) else d.pick((0, 3))
    shape = tuple(d.size() for _ in range(ndim))
    x = d.tensor(shape, _dtype(d))
    reach = max(shape, default=1) + 2
    diagonal = d.rng.randint(-reach, reach) if d.chance(0.8) else 0
    kwargs = {}
    if d.chance(0.25) and ndim in (1, 2):
        meta = torch.diag(torch.empty(shape, device="meta"), diagonal)
        kwargs = _out(d, [x], meta.shape, d.dtype, in_place=False)
    return (x, diagonal), kwargs


def interpreted(make):
    """The wrapper and its kernel against torch on the CPU, bit for bit: every function
    in float32, half types, bool and int64 (kernels of 4, 2, 1 and 8 bytes); views
    (transposed, sliced, expanded, negated) as inputs and outputs; five dims that do
    not merge (a launch per index of the leading one); empty results, out=, and what
    torch refuses."""
    from tests.ops._runtime import load

    nt = load(make, "_layout", GROUPS)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.bool, torch.int64):
        every = dtype == torch.float32  # the index maps in one dtype, the widths in all
        check_stack(nt, dtype)
        check_select_copy(nt, dtype)
        check_rot90(nt, dtype, every)
        check_diag(nt, dtype, every)
    check_special_values(nt)
    check_refusals(nt)


def _values(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) < 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(-(2**40), 2**40, shape, dtype=dtype)


def check_stack(nt, dtype):
    x, y = _values((3, 4, 5), dtype), _values((5, 4, 3), dtype).permute(2, 1, 0)
    z = _values((3, 8, 5), dtype)[:, ::2]  # sliced
    for dim in range(-4, 4):
        same(nt.stack([x, y, z], dim), torch.stack([x, y, z], dim))
    same(nt.stack((x,), 1), torch.stack((x,), 1))
    scalars = [_values((), dtype) for _ in range(3)]
    same(nt.stack(scalars), torch.stack(scalars))
    out = torch.empty(3, 2, 4, 5, dtype=dtype).transpose(0, 1)  # a strided out=
    assert nt.stack([x, y], 0, out=out) is out
    same(out, torch.stack([x, y]))
    same(nt.stack([x[:, :0]] * 2, 2), torch.stack([x[:, :0]] * 2, 2))
    last = _values((2, 3, 4, 5), dtype).contiguous(memory_format=torch.channels_last)
    for dim in range(5):  # laid out as torch's: after channels-last inputs, for some dims
        got, want = nt.stack([last, last], dim), torch.stack([last, last], dim)
        same(got, want)
        assert got.stride() == want.stride(), dim


def check_select_copy(nt, dtype):
    x = _values((6, 7, 9), dtype).transpose(0, 2)
    for dim, index in itertools.product(range(-3, 3), (0, 3, -1)):
        same(nt.select_copy(x, dim, index), torch.select_copy(x, dim, index))
    vector = _values((37,), dtype)
    same(nt.select_copy(vector, 0, 36), torch.select_copy(vector, 0, 36))
    out = torch.empty(9, 6, dtype=dtype)
    assert nt.select_copy(x, 1, 2, out=out) is out
    same(out, torch.select_copy(x, 1, 2))


def check_rot90(nt, dtype, every=True):
    """Every k (negative and past 4) in every plane of 2, 3 and 4 dims (`every`; else
    each k in two planes of 3), contiguous and transposed (whose results torch lays out
    otherwise); five dims that merge into three, and five that do not."""
    shapes = ((5, 7), (3, 5, 7), (2, 3, 4, 5)) if every else ((3, 5, 7),)
    for shape in shapes:
        x = _values(shape, dtype)
        for view in (x, x.transpose(0, -1)):
            planes = itertools.permutations(range(view.ndim), 2) if every else ((0, 2), (2, 1))
            for first, second in planes:
                for k in (-3, -1, 0, 1, 2, 3, 6) if every else (0, 1, 2, 3):
                    got = nt.rot90(view, k, [first, second])
                    want = torch.rot90(view, k, [first, second])
                    same(got, want)
                    assert got.stride() == want.stride(), (shape, k, first, second)
    five = _values((2, 3, 4, 5, 6), dtype).permute(4, 2, 0, 3, 1)  # merges into 3 dims
    same(nt.rot90(five, 1, (1, 3)), torch.rot90(five, 1, (1, 3)))
    gaps = _values((4, 6, 8, 10, 6), dtype)[::2, ::2, ::2, ::2, ::2]  # five that do not
    for k, dims in ((1, (1, 3)), (-2, (4, 0)), (3, (0, 4))):
        same(nt.rot90(gaps, k, dims), torch.rot90(gaps, k, dims))
    out = torch.empty(7, 5, dtype=dtype)
    square = _values((5, 7), dtype)
    assert nt.rot90(square, out=out) is out
    same(out, torch.rot90(square))


def check_diag(nt, dtype, every=True):
    """upstream's cases: vectors (of stride 2) on and off the main diagonal, empty ones
    (a matrix of zeros), matrices square and not, transposed, diagonals past their
    ends (empty); `every` or a few of them."""
    offsets = (0, 1, -1, 3, -3, 4, -4, 5, -5) if every else (0, 3, -4)
    for n, diagonal in itertools.product((1, 5, 10) if every else (5,), offsets):
        x = _values((n * 2,), dtype)[::2]
        same(nt.diag(x, diagonal), torch.diag(x, diagonal))
    for diagonal in (0, 3, -3):
        empty = _values((0,), dtype)
        same(nt.diag(empty, diagonal), torch.diag(empty, diagonal))
    for shape in ((5, 5), (3, 5), (5, 3), (10, 10)) if every else ((3, 5),):
        for diagonal in offsets:
            matrix = _values(shape, dtype)
            same(nt.diag(matrix, diagonal), torch.diag(matrix, diagonal))
            same(nt.diag(matrix.t(), diagonal), torch.diag(matrix.t(), diagonal))
    out = torch.empty(7, 7, dtype=dtype).t()
    vector = _values((5,), dtype)
    assert nt.diag(vector, -2, out=out) is out
    same(out, torch.diag(vector, -2))


def check_special_values(nt):
    """NaN with a payload, infinities and -0.0 copied as they are; an input with the
    negative bit (its memory holds its values negated) read as its values."""
    x = torch.tensor([math.nan, -math.inf, -0.0, 0.0, 1e-40, 3.0])
    x.view(torch.int32)[0] |= 0x5A5A  # a payload
    same(nt.stack([x, x]), torch.stack([x, x]))
    same(nt.diag(x, 1), torch.diag(x, 1))
    negated = torch._neg_view(_values((4, 6), torch.float32))
    assert negated.is_neg()
    same(nt.rot90(negated), torch.rot90(negated.resolve_neg()))
    same(nt.select_copy(negated, 1, 2), negated.resolve_neg()[:, 2].contiguous())


def check_refusals(nt):
    """What torch refuses, with errors of its kinds; what the kernels cannot copy
    (16-byte elements), naming the way round; an out= of another shape or dtype."""
    x = torch.randn(3, 4)
    refusals = [
        (lambda: nt.stack([]), ValueError, "non-empty"),
        (lambda: nt.stack(x), TypeError, "list or tuple"),
        (lambda: nt.stack([x, x.t()]), ValueError, "equal size"),
        (lambda: nt.stack([x, x.double()]), TypeError, "promote"),
        (lambda: nt.stack([x, x], 3), IndexError, "out of range"),
        (lambda: nt.select_copy(x, 2, 0), IndexError, "out of range"),
        (lambda: nt.select_copy(x, 0, 3), IndexError, "index 3 out of range"),
        (lambda: nt.select_copy(torch.tensor(1.0), 0, 0), IndexError, "0-dim"),
        (lambda: nt.rot90(x, 1, [0]), ValueError, "rotation dims == 2"),
        (lambda: nt.rot90(x[0], 1), ValueError, "total dims >= 2"),
        (lambda: nt.rot90(x, 1, [1, -1]), ValueError, "different"),
        (lambda: nt.rot90(x, 1, [0, 2]), ValueError, "different"),
        (lambda: nt.rot90(x, 1, [0, 3]), IndexError, "out of range"),
        (lambda: nt.diag(x[None]), ValueError, "1-D or 2-D"),
        (lambda: nt.diag(x.to(torch.complex128)), TypeError, "view_as_real"),
        (lambda: nt.diag(x, out=torch.empty(4)), ValueError, "shape"),
        (lambda: nt.rot90(x, out=torch.empty(4, 3, dtype=torch.float16)), TypeError, "float32"),
        (lambda: nt.diag(x, out=torch.empty(3, requires_grad=True)), RuntimeError, "differen"),
    ]
    for call, kind, words in refusals:
        with pytest.raises(kind, match=words):
            call()
