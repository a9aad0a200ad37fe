"""sgn (kernels/sgn.py; real tensors take sign's kernels): complex64 tensors, whose real
views (torch.view_as_real) its kernels take, compared with torch.sgn part by part.
The interpreted check runs the runtime wrapper (aot/runtime/_sgn.py) on the CPU, its
kernel under Triton's interpreter, against torch's CPU kernel on ordinary values and
`by_parts` (torch's CUDA kernel's arithmetic) on special ones;
tests/gpu/test_upstream_calls.py compares both with torch's CUDA kernel."""

import math

import pytest
import torch

from tests.calls import Call, contiguous
from tests.gpu.layouts import WIDE, spec_shape, values
from tests.tolerances import tolerance

# Parts of the interpreted check's grid (every pair of them is one element): zeros of
# both signs, infinities, NaN, moduli past float32 (3e38 + 3e38j) and within it
# (3e38 + 0j), subnormals, ordinary numbers.
PARTS = (0.0, -0.0, math.inf, -math.inf, math.nan, 3e38, -3e38, 1e-40, 1e-45, 1.0, -2.5)


def num_tensors(variant):
    return 2  # the input's real view and the output's


def run(nt, variant, spec, dtype, bucket):
    """A complex64 input whose real view runs the kernel `spec` of `variant`'s ndim."""
    x = laid_out(variant["ndim"], spec)
    return nt.sgn(x), torch.sgn(x)


def laid_out(ndim, spec, device="cuda"):
    """A complex64 tensor whose real view (..., 2) coalesces to `ndim` dims for kernel
    `spec`: its last dim contiguous (one dim with the pairs), the others padded apart;
    16-byte aligned, with sizes and strides in multiples of 16 floats, or 8 bytes off;
    for 64-bit kernels 2^30 elements between its first dim's two entries. The output
    the wrapper allocates is contiguous, which these assumptions hold for too."""
    real = spec_shape(ndim, spec)
    shape = (*real[:-1], real[-1] // 2 if spec.aligned else real[-1])
    if spec.width == 64:
        shape = (2, *shape[1:])
    strides, step = [1], shape[-1]
    for size in reversed(shape[:-1]):
        step += 8 if spec.aligned else 1
        step = -(-step // 8) * 8 if spec.aligned else step
        strides.insert(0, step)
        step *= size
    if spec.width == 64:
        strides[0] = -(-WIDE // 16) * 8  # complex elements: 2^31 + 64 floats
    offset = 0 if spec.aligned else 1
    span = offset + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True))
    storage = torch.empty(span + 1, dtype=torch.complex64, device=device)
    view = storage.as_strided(shape, strides, offset)
    view.copy_(values(shape, torch.complex64, device=device))
    view[(0,) * (view.ndim - 1)][:2] = 0  # sgn(0) is 0
    return view


def check(result, reference, variant=None, dtype=None):
    close(result, reference)


def close(got, want):
    """Complex64 results, part by part at float32's tolerance, NaN where torch's are."""
    assert got.dtype == want.dtype == torch.complex64
    assert got.shape == want.shape
    parts = (torch.view_as_real(t.resolve_conj()) for t in (got, want))
    torch.testing.assert_close(*parts, equal_nan=True, **tolerance(torch.float32))


def by_parts(z):
    """torch.sgn as torch's CUDA kernel computes it: z / std::abs(z), c10::complex's
    division by a real number, part by part, by the modulus (hypot's, as torch.abs's),
    0 where z is 0. torch's CPU kernel agrees in its vectorised loop; its scalar loop (a
    tensor's tail, and tensors of a few elements) divides by |z| + 0j as a complex
    number, which gives NaN + NaNj beside any infinite part (inf + 1j: NaN + 0j here)."""
    parts = torch.view_as_real(z.resolve_conj())
    pairs = torch.where(z[..., None] == 0, 0.0, parts / torch.abs(z)[..., None])
    return torch.view_as_complex(pairs.contiguous())


def calls(name, dtype):
    """Complex64 inputs (the fake-tensor check and opcheck), contiguous and transposed,
    with out=."""
    shape = (6, 42, 123)
    across = contiguous((6, 123, 42))
    across[-2], across[-1] = across[-1], across[-2]

    def complex_(strides=None, out=False):
        def arguments(make):
            x = make(shape, torch.complex64, strides=strides)
            return (x,), {"out": make(shape, torch.complex64)} if out else {}

        return arguments

    return [
        Call("sgn of a complex64 input", name, complex_()),
        Call("sgn of a complex64 input out=", name, complex_(out=True)),
        Call("sgn of a transposed complex64 input", name, complex_(across)),
    ]


def fuzz_spec():
    """Real inputs as sign's (its kernels), complex64 ones one call in three."""
    from tests.gpu.fuzz_inputs import FLOATS, INTEGERS
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, torch.sgn, FLOATS + INTEGERS, kernel="sign", names=("sign",))


def _draw(d, op):
    """A real input and out= as any unary op's; or a complex64 one: a contiguous float32
    (..., 2) base viewed as complex (values with specials now and then), maybe sliced,
    transposed or conjugated, out= a fresh complex64 tensor one time in three."""
    from tests.gpu import fuzz_ops

    if not d.chance(1 / 3):
        return fuzz_ops._unary(d, op)
    d.dtype = torch.float32  # the case's dtype: its kernel's, complex64's parts'
    shape = d.shape()
    x = _complex(d, shape)
    if len(shape) > 1 and d.chance(0.3):
        order = (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2)
        x = d.view_of(x, [("permute", order)], (*shape[:-2], shape[-1], shape[-2]))
    elif shape and shape[-1] > 1 and d.chance(0.3):
        x = d.view_of(
            x, [("slice", len(shape) - 1, 0, shape[-1], 2)], (*shape[:-1], -(-shape[-1] // 2))
        )
    if d.chance(0.15):
        x = d.view_of(x, [("conj",)], d.shapes[x][0])
        d.note("a conjugated view")
    if d.chance(1 / 3):
        return (x,), {"out": _complex(d, d.shapes[x][0])}
    return (x,), {}


def _complex(d, shape):
    """A complex64 Operand of `shape`: a float32 (..., 2) base viewed as complex."""
    parts = d.tensor((*shape, 2), torch.float32, layout="plain", exotic=False)
    view = d.view_of(parts, [("complex",)], shape)
    d.shapes[view] = (tuple(shape), torch.complex64)
    return view


def interpreted(make):
    """The wrapper and its kernel against torch: every pair of `PARTS` against
    `by_parts` (torch's CUDA kernel's arithmetic; its CPU kernel's differs in a
    tensor's tail), random values (a quarter of them `layouts.SPECIAL` ones, which
    hold no two infinities) against torch.sgn on the CPU, in views (transposed, sliced,
    expanded, conjugated, 0-dim, empty); out= contiguous, transposed, conjugated, the
    input itself; the refusals."""
    from tests.ops._runtime import load

    nt = load(make, "_sgn", {"sign": {"sign": {}}, "sgn": {"sgn": {}}})
    parts = torch.tensor(PARTS)
    grid = torch.complex(
        parts[:, None].expand(-1, len(PARTS)), parts[None, :].expand(len(PARTS), -1)
    )
    close(nt.sgn(grid), by_parts(grid))
    z = values((5, 6, 7), torch.complex64, device="cpu")
    z[0, 0, :3] = 0
    special = values((5, 6, 7), torch.complex64, "special", device="cpu")
    for x, reference in ((z, torch.sgn), (special, by_parts)):
        for view in (x, x.mT, x[:, ::2, 1:], x[:1].expand(4, -1, -1), x.conj(), x.mT.conj()):
            close(nt.sgn(view), reference(view))
        close(nt.sgn(x[0, 0, 0]), reference(x[0, 0, 0]))
    close(nt.sgn(z[:0]), torch.sgn(z[:0]))
    for out in (torch.empty_like(z), torch.empty_like(z.mT).mT, torch.empty_like(z).conj()):
        assert nt.sgn(z, out=out) is out
        close(out, torch.sgn(z))
    x = z.clone()
    assert nt.sgn(x, out=x) is x  # in place
    close(x, torch.sgn(z))
    with pytest.raises(RuntimeError, match=r"sgn: no prebuilt kernel for torch\.complex128"):
        nt.sgn(z.to(torch.complex128))
    with pytest.raises(RuntimeError, match=r"sgn: out is torch\.float32"):
        nt.sgn(z, out=torch.empty(5, 6, 7))
    with pytest.raises(ValueError, match=r"sgn: out has shape \(5, 6\)"):
        nt.sgn(z, out=torch.empty(5, 6, dtype=torch.complex64))
