"""Calls of every declared function, for the suites that check what torch sees of an op
rather than its values: the fake-tensor check (tests/unit/test_library.py, and the
oldest torch's in tests/unit/test_oldest_torch.py) and opcheck (tests/gpu/test_compile.py).

A function's calls are its declared samples (its kernel file's `API`, as the wheel
ships it in `_ops.APIS`), each as it is, with out= and in place where the function
writes, in one float dtype its op is built for; then what a composite op's module in
tests/ops/ adds (`calls(name, dtype)`) where a sample cannot say it (a KV cache's slots, a
dtype= argument). Nothing here names an op.

A call is made, not stored: `Call.arguments(make)` builds fresh arguments whose
tensors come from `make`, so the same call runs on fake CUDA tensors, on real ones,
or on the meta device (where an out= tensor's shape is found).
"""

import dataclasses
import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import torch

from tests.gpu.layouts import BY_NAME

# What these calls found in the runtime (aot/runtime/, not the tests' to fix), by
# function, with why: the suites that make them expect its calls' problems until the
# fix, and fail after it (then remove the entry). Empty: the last, mm's and bmm's
# traced routes naming `mat2` `other`, was fixed with the ops' library sides.
KNOWN: dict[str, str] = {}
# The dtype a function's calls are made in: its op's first built of these, else its
# op's first (integer ops).
FLOATS = ("fp16", "bf16", "fp32", "fp64")
# How a call's tensors are laid out: as they come, or as their last two dims'
# transposes are (outputs must follow torch's stride rules).
LAYOUTS = ("contiguous", "transposed")


class Make(Protocol):
    """Makes a call's tensors: of `shape` and `dtype`, with `strides` (None:
    contiguous), values in `domain` ("positive": away from 0) where they are real, or
    int64 indices in [0, `bound`)."""

    def __call__(
        self,
        shape: Sequence[int],
        dtype: torch.dtype,
        *,
        strides: Sequence[int] | None = None,
        domain: str | None = None,
        bound: int | None = None,
    ) -> torch.Tensor: ...


Arguments = tuple[tuple[Any, ...], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Call:
    """A call of public function `name`: `arguments(make)` gives fresh (args, kwargs);
    `reference`, torch's answer to the same arguments where the declared reference
    cannot take them (None: the declared one)."""

    label: str
    name: str
    arguments: Callable[[Make], Arguments]
    reference: Callable[..., Any] | None = None


def on(device: str) -> Make:
    """A `Make` of uninitialised tensors on `device` ("cuda" under FakeTensorMode:
    fake CUDA tensors; "meta")."""

    def make(shape, dtype, *, strides=None, domain=None, bound=None):
        dtype = torch.int64 if bound is not None else dtype
        strides = strides or contiguous(shape)
        return torch.empty_strided(tuple(shape), tuple(strides), dtype=dtype, device=device)

    return make


def calls(
    apis: Iterable[Mapping[str, Any]],
    dtypes: Mapping[str, Sequence[str]],
    layouts: Sequence[str] = ("contiguous",),
) -> list[Call]:
    """Every call of the functions `apis` (declarations, as `_ops.APIS` has them) whose
    op has `dtypes` (manifest names, per op: the ones built), in each of `layouts`
    ("transposed": tensors of two dims or more laid out as their last two dims'
    transposes are), then the ones their op's module in tests/ops/ adds
    (`calls(name, dtype)`)."""
    from tests.ops import makers

    found, extra = [], makers()
    for api in apis:
        dtype = dtype_of(dtypes.get(api["op"], ()))
        if dtype is None:
            continue
        for index, sample in enumerate(api["samples"]):
            for layout in layouts:
                found += _forms(api, index, sample, dtype, layout)
        own = getattr(extra.get(api["op"]), "calls", None)
        found += own(api["name"], dtype) if own else []
    return found


def dtype_of(built: Sequence[str]) -> torch.dtype | None:
    """The dtype an op's calls are made in, of the ones `built` (manifest names)."""
    chosen = next((short for short in FLOATS if short in built), None) or next(iter(built), None)
    return None if chosen is None else BY_NAME[chosen]


def reference(call: Call, api: Mapping[str, Any]) -> Callable[..., Any]:
    """The torch function that answers `call` of function `api`."""
    return call.reference if call.reference is not None else resolve(api["reference"])


def resolve(dotted: str) -> Callable[..., Any]:
    """The function at `dotted` ("torch.nn.functional.gelu"): a declared reference."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _forms(api, index, sample, dtype, layout):
    """Sample `index` of `api` as it is, and with out= or in place where it writes."""
    name = api["name"]
    label = f"{name} sample {index}" + ("" if layout == "contiguous" else f" {layout}")

    def plain(make):
        return _arguments(api, sample, dtype, layout, make)

    found = [Call(label, name, plain)]
    if api["writes"] == "out" and not _several(api):

        def out(make):
            args, kwargs = plain(make)
            result = _result(api, sample, dtype, layout)
            return args, {**kwargs, "out": make(result.shape, result.dtype)}

        found.append(Call(f"{label} out=", name, out))
    elif api["writes"] == "inplace" and "input" in sample["shapes"]:

        def inplace(make):
            args, kwargs = plain(make)
            return args, {**kwargs, "inplace": True}

        found.append(Call(f"{label} inplace", name, inplace))
    return found


def _several(api):
    """Whether `api`'s op returns several tensors (max: values and indices), whose out=
    torch takes as a tuple and no out= overload can (each writes one tensor): its
    tests/ops module's `calls` give its out= calls."""
    returns = [o["schema"].rsplit("->", 1)[1] for o in api["overloads"] if not o["writes"]]
    return any(one.strip().startswith("(") for one in returns)


def _result(api, sample, dtype, layout):
    """The reference's result for the sample, on the meta device (its shape and dtype)."""
    args, kwargs = _arguments(api, sample, dtype, layout, on("meta"))
    return resolve(api["reference"])(*args, **kwargs)


def _arguments(api, sample, dtype, layout, make):
    """The sample's arguments: its first parameter by position, the others by name (as
    torch's builtins take some); tensors from `make`, numbers as torch takes them
    beside a tensor of `dtype`."""
    types = {param["name"]: param["type"] for param in api["params"]}
    values = {}
    for name, value in sample["values"].items():
        if name in sample["indices"]:
            values[name] = make(value, torch.int64, bound=sample["indices"][name])
        elif name in sample["shapes"]:
            strides = _transposed(value) if layout == "transposed" else None
            own = torch.float32 if name in sample.get("float32", ()) else dtype
            own = torch.float8_e4m3fn if name in sample.get("float8", ()) else own
            values[name] = make(value, own, strides=strides, domain=sample["domain"])
        elif types[name] == "Tensor[]":  # a list of shapes (stack's tensors)
            values[name] = [
                make(shape, dtype, strides=_transposed(shape) if layout == "transposed" else None)
                for shape in value
            ]
        elif types[name] in ("Tensor|Number", "Tensor|Number?", "Scalar"):
            values[name] = number(value, dtype)
        elif types[name] == "ScalarType?" and isinstance(value, str):
            values[name] = getattr(torch, value)
        else:
            values[name] = value
    first = api["params"][0]["name"]
    return (values.pop(first),), values


def number(value, dtype):
    """A sample's number, as torch would take it beside a tensor of `dtype`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if dtype == torch.bool:
        return bool(value)
    return value if dtype.is_floating_point else int(value)


def contiguous(shape):
    """The strides of a contiguous tensor of `shape`."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


def _transposed(shape):
    """The strides of a tensor of `shape` laid out as its last two dims' transpose is
    (`t.mT.contiguous().mT`); None (contiguous) below two dims."""
    if len(shape) < 2:
        return None
    strides = contiguous([*shape[:-2], shape[-1], shape[-2]])
    strides[-2], strides[-1] = strides[-1], strides[-2]
    return strides
