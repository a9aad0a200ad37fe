"""Every function of the installed wheel, on the samples its kernel file declares
(`API`; the wheel lists them in `_ops.APIS`), in every dtype built for it, compared
with the torch function it declares as its reference: contiguous and as strided
views, through out= and in place where the function has them.

Nothing here names an op: a kernel file added to kernels/ is tested by its samples
(tests/unit/test_adding_an_op.py checks that this file collects them)."""

import pytest
import torch

from tests.calls import number, resolve
from tests.gpu.layouts import BY_NAME as DTYPES
from tests.gpu.layouts import values
from tests.tolerances import tolerance

LAYOUTS = ("contiguous", "strided")
REFUSALS = (RuntimeError, TypeError, ValueError, NotImplementedError, IndexError)


def _cases():
    try:
        import ntops_prebuilt
        from ntops_prebuilt import _ops
    except ImportError:
        return []
    built = {}
    for variant in ntops_prebuilt.manifest()["variants"]:
        if variant["kernels"]:
            built.setdefault(variant["op"], set()).add(variant["dtype"])
    return [
        pytest.param(api, index, dtype, layout, id=f"{api['name']}-{index}-{dtype}-{layout}")
        for api in _ops.APIS
        for index in range(len(api["samples"]))
        for dtype in sorted(built.get(api["op"], ()))
        for layout in LAYOUTS
    ]


def pytest_generate_tests(metafunc):
    if "api" in metafunc.fixturenames:
        cases = _cases() or [
            pytest.param(None, None, None, None, marks=pytest.mark.skip("no wheel installed"))
        ]
        metafunc.parametrize(("api", "index", "dtype", "layout"), cases)


def _strided(tensor):
    """`tensor`'s values in a view whose last two dims are transposed in memory."""
    if tensor.ndim < 2:
        return tensor
    return tensor.mT.contiguous().mT


def _arguments(api, sample, dtype, layout):
    params = {param["name"]: param for param in api["params"]}
    arguments = {}
    for name, value in sample["values"].items():
        if name in sample["indices"]:
            bound = sample["indices"][name]
            arguments[name] = torch.randint(0, bound, tuple(value), device="cuda")
        elif name in sample["shapes"]:
            own = torch.float32 if name in sample.get("float32", ()) else dtype
            own = torch.float8_e4m3fn if name in sample.get("float8", ()) else own
            tensor = values(tuple(value), own, domain=sample["domain"])
            arguments[name] = _strided(tensor) if layout == "strided" else tensor
        elif params[name]["type"] == "Tensor[]":  # a list of shapes (stack's tensors)
            tensors = [values(tuple(shape), dtype, domain=sample["domain"]) for shape in value]
            arguments[name] = [_strided(t) if layout == "strided" else t for t in tensors]
        elif params[name]["type"] in ("Tensor|Number", "Tensor|Number?", "Scalar"):
            arguments[name] = number(value, dtype)
        elif params[name]["type"] == "ScalarType?" and isinstance(value, str):
            arguments[name] = getattr(torch, value)
        else:
            arguments[name] = value
    return arguments


def _call(function, api, arguments):
    """`function` with the first parameter by position, the others by name."""
    first = api["params"][0]["name"]
    rest = {name: value for name, value in arguments.items() if name != first}
    return function(arguments[first], **rest)


def _copies(arguments):
    return {
        name: value.clone() if isinstance(value, torch.Tensor) else value
        for name, value in arguments.items()
    }


def _assert_matches(result, expected, api, dtype):
    if isinstance(expected, tuple):  # attention's output and log-sum-exp
        assert isinstance(result, tuple)
        assert len(result) == len(expected)
        for one, theirs in zip(result, expected, strict=True):
            _assert_matches(one, theirs, api, dtype)
        return
    assert result.dtype == expected.dtype
    assert result.shape == expected.shape
    if api["tolerance"] and expected.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        # torch.testing compares FP8 bit for bit only: a declared tolerance (a unit of
        # e4m3fn where fp32 rounds apart) compares their values; without one, bits.
        result, expected = result.float(), expected.float()
    if expected.dtype.is_floating_point:
        within = tolerance(dtype, api["tolerance"], result=expected.dtype)
        torch.testing.assert_close(result, expected, equal_nan=True, **within)
    else:
        assert torch.equal(result, expected)


def test_sample(nt, api, index, dtype, layout):
    dtype_ = DTYPES[dtype]
    sample = api["samples"][index]
    function, reference = getattr(nt, api["name"]), resolve(api["reference"])
    arguments = _arguments(api, sample, dtype_, layout)
    try:
        expected = _call(reference, api, _copies(arguments))
    except REFUSALS as error:
        with pytest.raises((*REFUSALS, nt.NotBuiltError)):  # as torch refuses it
            _call(function, api, arguments)
        pytest.skip(f"torch refuses it too: {error}")
    _assert_matches(_call(function, api, arguments), expected, api, dtype_)
    if api["writes"] == "out":
        if isinstance(expected, tuple):  # several results (max's): torch's out= is a tuple
            out = tuple(torch.empty_like(one) for one in expected)
            written = _call(function, api, {**arguments, "out": out})
            assert all(one is mine for one, mine in zip(written, out, strict=True))
        else:
            out = torch.empty_like(expected)
            assert _call(function, api, {**arguments, "out": out}) is out
        _assert_matches(out, expected, api, dtype_)
    elif api["writes"] == "inplace" and "input" in sample["shapes"]:
        written = _copies(arguments)
        assert _call(function, api, {**written, "inplace": True}) is written["input"]
        _assert_matches(written["input"], expected, api, dtype_)
