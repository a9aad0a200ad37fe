"""Every kernel in the installed wheel, run on inputs laid out for its spec, checked
against torch, and checked to be the kernel that actually ran."""

import functools

import pytest
import torch

from tests.gpu.layouts import Spec, assert_kernel, strided

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# Elementwise results round once from fp32, as torch's do; reductions and
# transcendental functions differ from torch's by a few ulps of the dtype.
TOLERANCES = {
    torch.float16: {"rtol": 2e-3, "atol": 2e-3},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
    torch.float32: {"rtol": 2e-5, "atol": 2e-5},
}
SHAPES = {"aligned": (3, 5, 2, 48), "odd": (3, 5, 2, 37)}


def _kernels():
    try:
        import ntops_prebuilt
    except ImportError:
        return []
    return [
        pytest.param(variant, kernel["spec"], id=kernel["id"])
        for variant in ntops_prebuilt.manifest()["variants"]
        for kernel in variant["kernels"]
    ]


def pytest_generate_tests(metafunc):
    if "variant" in metafunc.fixturenames:
        kernels = _kernels()
        if not kernels:
            kernels = [pytest.param(None, None, marks=pytest.mark.skip("no wheel installed"))]
        metafunc.parametrize(("variant", "spec"), kernels)


def _shape(ndim, spec):
    return SHAPES["aligned" if spec.aligned else "odd"][4 - ndim :]


def _elementwise(nt, variant, spec, dtype):
    shape = _shape(variant["ndim"], spec)
    wide = spec.width == 64
    layout = functools.partial(strided, shape, dtype, aligned=spec.aligned, wide=wide)
    if variant["op"] == "gelu":
        (unit, _) = spec.unit
        x = layout(unit=unit)
        approximate = variant["switches"]["approximate"]
        return nt.gelu(x, approximate=approximate), torch.nn.functional.gelu(
            x, approximate=approximate
        )
    a, b, out = (layout(unit=unit) for unit in spec.unit)
    if variant["op"] == "add":
        return nt.add(a, b, alpha=0.5, out=out), torch.add(a, b, alpha=0.5)
    return nt.mul(a, b, out=out), torch.mul(a, b)


def _rows(nt, variant, spec, dtype):
    shape = _shape(variant["ndim"], spec)
    wide = spec.width == 64
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=wide)
    shape = x.shape
    if variant["op"] == "softmax":
        return nt.softmax(x, -1), torch.softmax(x, -1)
    n = shape[-1]
    weight = None
    if len(spec.unit) == 3:
        weight = strided((n,), dtype, unit=spec.unit[1], aligned=spec.aligned)
    expected = torch.nn.functional.rms_norm(
        x.float(), (n,), None if weight is None else weight.float(), 1e-6
    )
    return nt.rms_norm(x, (n,), weight, 1e-6), expected.to(dtype)


def _mm(nt, variant, spec, dtype):
    m, k, n = (64, 32, 48) if spec.aligned else (37, 23, 29)
    wide = spec.width == 64
    m = 2 if wide else m  # a wide layout has two rows, 2^31 elements apart
    a = strided((m, k), dtype, unit=spec.unit[0], aligned=spec.aligned, wide=wide)
    b = strided((k, n), dtype, unit=spec.unit[1], aligned=spec.aligned)
    out = strided((m, n), dtype, unit=spec.unit[2], aligned=spec.aligned)
    precision = variant["switches"]["fp32_precision"]
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest" if precision == "ieee" else "high")
    try:
        result = nt.mm(a, b, out=out)
    finally:
        torch.set_float32_matmul_precision(previous)
    return result, (a.double() @ b.double())


def _num_tensors(variant):
    if variant["op"] in ("gelu", "softmax"):
        return 2
    if variant["op"] == "rms_norm":
        return 3 if variant["switches"]["weight"] == "given" else 2
    return 3


def test_kernel(nt, variant, spec):
    dtype = DTYPES[variant["dtype"]]
    parsed = Spec.parse(spec, _num_tensors(variant))
    op = variant["op"]
    if op == "mm":
        result, reference = _mm(nt, variant, parsed, dtype)
        assert_kernel(nt, f"{variant['id']}/{spec}")
        error = (result.double() - reference).norm() / reference.norm()
        ieee = dtype == torch.float32 and variant["switches"]["fp32_precision"] == "ieee"
        assert error < {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(
            dtype, 1e-5 if ieee else 2e-3
        )
        return
    run = _rows if op in ("softmax", "rms_norm") else _elementwise
    result, reference = run(nt, variant, parsed, dtype)
    assert_kernel(nt, f"{variant['id']}/{spec}")
    torch.testing.assert_close(result, reference, **TOLERANCES[dtype])
    if parsed.width == 64:
        torch.cuda.empty_cache()
