"""Every kernel in the installed wheel, run through the public function on inputs laid
out for its spec, checked against torch and checked to be the kernel that ran."""

import math

import pytest
import torch

from tests.calls import resolve
from tests.gpu.layouts import BY_NAME as DTYPES
from tests.gpu.layouts import Spec, assert_kernel, spec_shape, strided
from tests.ops import makers
from tests.tolerances import tolerance


def _ordinary():
    """The ordinary ops' declarations, by op: their kernels are called as the
    declaration (_ops.APIS) says (the kernel's parameters, switches and sample values);
    a composite op's (a hand-written runtime wrapper) as its module in tests/ops/ lays
    them out."""
    try:
        from ntops_prebuilt import _ops
    except ImportError:
        return {}
    found = {}
    for api in _ops.APIS:  # a kernel several functions share: the first's call
        if api["wrapper"] is None:
            found.setdefault(api["op"], api)
    return found


ORDINARY = _ordinary()


def _declared_tolerance(op):
    """The tolerance op `op`'s own function declares (its kernel file's first API)."""
    from ntops_prebuilt import _ops

    return next(api["tolerance"] for api in _ops.APIS if api["op"] == op)


def _kernels():
    try:
        import ntops_prebuilt
    except ImportError:
        return []
    variants = ntops_prebuilt.manifest()["variants"]
    arch = _device_arch({variant["arch"] for variant in variants})
    return [
        pytest.param(variant, kernel, id=kernel["id"])
        for variant in variants
        if variant["arch"] == arch
        for kernel in variant["kernels"]
    ]


def _device_arch(arches):
    """The wheel's arch whose cubins run on this GPU, as the launcher chooses: its
    capability, else the nearest older one of its major version (sm_90 and newer
    cubins are arch-specific). A multi-arch wheel is tested on this GPU's part."""
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    capability = 10 * major + minor
    runs = [
        int(arch.removeprefix("sm_"))
        for arch in arches
        if (built := int(arch.removeprefix("sm_"))) == capability
        or (built < 90 and built // 10 == major and built <= capability)
    ]
    return f"sm_{max(runs)}" if runs else None


def pytest_generate_tests(metafunc):
    if "variant" in metafunc.fixturenames:
        kernels = _kernels()
        if not kernels:
            kernels = [
                pytest.param(
                    None,
                    None,
                    marks=pytest.mark.skip(
                        "no wheel installed, or none of its kernels runs on this GPU"
                    ),
                )
            ]
        metafunc.parametrize(("variant", "kernel"), kernels)


def _num_tensors(variant):
    op, switches = variant["op"], variant["switches"]
    if op in ORDINARY:  # the tensors among the kernel's parameters, and the output
        api = ORDINARY[op]
        return 1 + sum(_is_tensor(api, name, switches) for name in _passed(api))
    return _maker(op).num_tensors(variant)


def _maker(op):
    """Composite op `op`'s module in tests/ops/ (tests/ops/__init__.py says what it holds)."""
    found = makers().get(op)
    if found is None:
        raise LookupError(
            f"{op}: a composite op (its function has a hand-written runtime wrapper) needs "
            f"tests/ops/{op}.py with num_tensors(variant) and run(nt, variant, spec, dtype, "
            "bucket) to lay out its kernels' inputs; see tests/ops/__init__.py"
        )
    return found


def _passed(api):
    """The kernel parameters a call passes: the function passes its bound ones."""
    return [name for name in api["kernel"] if name not in api.get("bound", {})]


def _is_tensor(api, name, switches):
    from ntops_prebuilt import _ops

    kind = next(p["type"] for p in api["params"] if p["name"] == name)
    return kind == "Tensor" or (kind == "Tensor|Number" and switches[name] == _ops.TENSOR)


def _value(api, name):
    """A number parameter's value in the first sample giving one, else its default."""
    for sample in api["samples"]:
        if name in sample["values"]:
            return sample["values"][name]
    return next(p["default"] for p in api["params"] if p["name"] == name)


def _declared(nt, api, variant, spec, dtype):
    """An ordinary op's kernel, called with tensors in the spec's layout where its
    declaration has tensors, and compared with the torch function it declares."""
    from ntops_prebuilt import _ops

    switches = variant["switches"]
    shape = spec_shape(variant["ndim"], spec)
    domain = next((s["domain"] for s in api["samples"] if s["domain"]), None)
    wide = spec.width == 64
    units = iter(spec.unit)
    arguments = {}
    for name in _passed(api):
        if _is_tensor(api, name, switches):
            arguments[name] = strided(
                shape, dtype, unit=next(units), aligned=spec.aligned, wide=wide, domain=domain
            )
        elif name in switches:  # a number operand
            arguments[name] = True if dtype == torch.bool else 1.5 if dtype.is_floating_point else 3
        else:
            arguments[name] = _value(api, name)
    for switch, pick in api["switches"].items():
        if pick["rule"] == "value":
            nullable = any(p["name"] == switch and p["type"] == "str?" for p in api["params"])
            value = switches[switch]
            arguments[switch] = None if nullable and value == _ops.NONE else value
    first = _passed(api)[0]
    named = {name: value for name, value in arguments.items() if name != first}
    reference = resolve(api["reference"])
    expected = reference(arguments[first], **named)
    function = getattr(nt, api["name"])
    if api["writes"] != "out":
        return function(arguments[first], **named), expected
    out = strided(shape, expected.dtype, unit=next(units), aligned=spec.aligned, wide=wide)
    return function(arguments[first], **named, out=out), expected


def test_kernel(nt, variant, kernel):
    dtype = DTYPES[variant["dtype"]]
    op = variant["op"]
    spec = Spec.parse(kernel["spec"], _num_tensors(variant))
    check = None
    if op in ORDINARY:
        result, reference = _declared(nt, ORDINARY[op], variant, spec, dtype)
    else:
        maker = _maker(op)
        result, reference = maker.run(nt, variant, spec, dtype, kernel["bucket"])
        check = getattr(maker, "check", None)
    assert_kernel(nt, kernel["id"])
    if check is not None:
        check(result, reference, variant, dtype)
    elif reference.dtype.is_floating_point:
        within = tolerance(dtype, _declared_tolerance(op), result=reference.dtype)
        torch.testing.assert_close(result, reference, equal_nan=True, **within)
    else:
        assert torch.equal(result, reference)
    if spec.width == 64:
        torch.cuda.empty_cache()


def test_dropout_keeps_about_one_minus_p(nt):
    x = torch.ones(1 << 20, device="cuda")
    for p in (0.1, 0.5, 0.9):
        kept = (nt.dropout(x, p) != 0).float().mean().item()
        assert abs(kept - (1 - p)) < 0.01
        assert math.isclose(nt.dropout(x, p).max().item(), 1 / (1 - p), rel_tol=1e-6)
