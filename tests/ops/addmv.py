"""addmv (kernels/addmv.py): compared with a float64 product by the norm of the error,
as the products are (tests/ops/matmul.py), and elementwise within fp32 accumulation's
bound in the fuzz (fuzz_ops._product_atol); the interpreted check runs the runtime
(aot/runtime/_addmv.py) on the CPU, its launch under Triton's interpreter
(tests/ops/_runtime.py)."""

import math

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import strided, values

GROUPS = {"addmv": {"addmv": {}}}


def num_tensors(variant):
    return 4  # input, mat, vec, output


def run(nt, variant, spec, dtype, bucket):
    """A matrix laid out for the spec (its unit dim, or none; a wide one 2^31 elements
    between its two rows), 300 columns: three tiles, the last partial."""
    mat = strided((37, 300), dtype, unit=spec.unit[1], aligned=spec.aligned, wide=spec.width == 64)
    bias, vec = values((mat.shape[0],), dtype), values((300,), dtype)
    result = nt.addmv(bias, mat, vec, beta=0.5, alpha=-2.0)
    return result, 0.5 * bias.double() - 2.0 * (mat.double() @ vec.double())


def check(result, reference, variant, dtype):
    """The error's norm relative to the result's: fp32 accumulation, one rounding."""
    assert result.dtype == dtype
    assert result.shape == reference.shape
    error = ((result.double() - reference).norm() / reference.norm()).item()
    limit = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-5)
    assert error < limit, f"{variant['id']}: relative error {error:.3g}, limit {limit:g}"


def calls(name, dtype):
    """A matrix in nn.Linear's transposed layout, and beta 0."""
    transposed = Call(
        "addmv of a transposed matrix, beta 0",
        name,
        lambda make: (
            (make((29,), dtype), make((64, 29), dtype).t(), make((64,), dtype)),
            {"beta": 0},
        ),
    )
    return [transposed]


def fuzz_spec():
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec, _product_atol

    return Spec(_draw, torch.addmv, FLOATS, atol=_product_atol)


def _draw(d, op):
    """A matrix in any layout, long rows now and then, an input of its rows or
    broadcast to them, beta (0 among them: NaN in the input must not reach the
    result) and alpha, out= one time in three; now and then sizes that do not match."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import _matrix, _out

    dtype = d.principal(FLOATS)
    m, k = d.size(long=False), d.size()
    bias = d.pick(((m,), (m,), (1,), ()))
    inputs = [_matrix(d, shape, dtype) for shape in (bias, (m, k), (k + d.chance(0.03),))]
    kwargs = {}
    if d.chance(0.5):
        kwargs["beta"] = d.pick((0, 0.5, -1, 2, 1.0))
    if d.chance(0.5):
        kwargs["alpha"] = d.pick((0.5, -1, 2, 1.0))
    if d.chance(0.3):
        kwargs |= _out(d, inputs, (m,), dtype, in_place=False)
    return tuple(inputs), kwargs


def interpreted(make):
    """The wrapper and its kernel against torch on the CPU: rows and columns not
    multiples of the tiles, a transposed matrix, a strided vector, no columns (beta *
    input), beta 0 over NaN, half types rounded once from fp32, out= the input itself;
    the input broadcast with stride 0 as the launcher passes it; an out= over the
    vector refused."""
    from tests.ops._runtime import load

    nt = load(make, "_addmv", GROUPS)
    for m, k in ((37, 64), (129, 300), (5, 1000), (3, 0)):
        mat, vec, bias = torch.randn(m, k), torch.randn(k), torch.randn(m)
        close(nt.addmv(bias, mat, vec), torch.addmv(bias, mat, vec))
        wanted = torch.addmv(bias, mat, vec, beta=0.5, alpha=-2)
        close(nt.addmv(bias, mat, vec, beta=0.5, alpha=-2), wanted)
    mat = torch.randn(64, 37).t()  # column-major
    vec = torch.randn(128)[::2]
    bias = torch.full((37,), math.nan)
    close(nt.addmv(bias, mat, vec, beta=0), torch.addmv(bias, mat, vec, beta=0))
    for dtype in (torch.float16, torch.bfloat16):
        mat, vec, bias = (torch.randn(shape).to(dtype) for shape in ((37, 300), (300,), (37,)))
        wanted = torch.addmv(bias.float(), mat.float(), vec.float(), alpha=0.5).to(dtype)
        close(nt.addmv(bias, mat, vec, alpha=0.5), wanted)
    mat, vec, bias = torch.randn(37, 64), torch.randn(64), torch.randn(37)
    wanted = torch.addmv(bias, mat, vec, beta=2)
    assert nt.addmv(bias, mat, vec, beta=2, out=bias) is bias
    close(bias, wanted)
    with pytest.raises(ValueError, match="vec"):
        nt.addmv(vec[:37], torch.randn(64, 64), vec, out=vec)
    check_broadcast(make)


def check_broadcast(make):
    """The kernel with the input broadcast to the rows (stride 0, as the launcher
    broadcasts a (1,) or () input), in tiles smaller than the build's."""
    kernel = make("addmv", 2, "fp32", block_size_m=8, block_size_k=16)
    mat, vec, bias = torch.randn(37, 45), torch.randn(45), torch.randn(1)
    out = torch.empty(37)
    kernel(bias.expand(37), mat, vec, 0.5, 3.0, out)
    close(out, torch.addmv(bias, mat, vec, beta=0.5, alpha=3.0))


def close(result, expected):
    """Within the tests' tolerance of the result's dtype (one rounding of fp32 sums)."""
    from tests.tolerances import tolerance

    assert result.dtype == expected.dtype
    torch.testing.assert_close(result, expected, equal_nan=True, **tolerance(expected.dtype))
