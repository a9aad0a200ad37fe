"""An op's torch-facing side, declared as data beside its `SPACE` (`API = Api(...)`).

A kernel file says what torch function it is: the signature with types and defaults,
the torch function that is its reference, and sample inputs for the tests. The rest
follows from the declaration, at build time, into the wheel:

- the kernel's parameters are the signature's, in order, less the output rules below
  and the parameters that only pick a switch;
- a switch is picked by the parameter of its name, by that parameter's type: a
  `Tensor|Number` parameter picks "tensor" or "scalar" (and a number is converted as
  torch's promotion would), a `Tensor?` one "given" or "none", a `str` one its own
  value (`str?`: None is the switch value "none");
- `Tensor? out=None` (keyword) is torch's out=, `bool inplace=False` writes `input`;
- the torch.library overloads (`.Tensor`, `.Scalar`, `.out`, `.Scalar_out`, `_`) and
  their schemas.

Ordinary ops get their runtime function rendered from this (templates/functions.py.j2);
an op whose call convention is special names its hand-written runtime module
(`wrapper`), one file per op. Importing this module imports no compiler.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Switch values the runtime picks by a parameter's type (the launcher's groups are
# named with them: `add-other=scalar`).
TENSOR, NUMBER = "tensor", "scalar"
GIVEN, NONE = "given", "none"

_REQUIRED = object()
_TYPES = ("Tensor", "Tensor?", "Tensor|Number", "Scalar", "float", "float?", "int", "int?")
_TYPES += ("bool", "str", "str?", "ScalarType?", "int[]", "Tensor|Number?")
# Dims as torch's reductions take them, one int or several (their schemas' own type).
_TYPES += ("int[1]", "int[1]?")
# A list of tensors, torch's schema type (stack's).
_TYPES += ("Tensor[]",)
_PARAMETER = re.compile(r"(?P<type>[\w|?\[\]]+) (?P<name>\w+)(?:=(?P<default>.+))?")


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: Any = _REQUIRED
    keyword: bool = False

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    @property
    def python(self) -> str:
        """As the parameter reads in a Python signature: `alpha=1`."""
        return self.name if self.required else f"{self.name}={self.default!r}"


@dataclasses.dataclass(frozen=True)
class Sample:
    """Arguments for a test call, by parameter name: a tuple of ints is the shape of a
    tensor argument (`()` a 0-dim one), anything else is passed as is. `domain` limits
    the values of floating inputs ("positive": away from 0, for rsqrt or pow; "special":
    a quarter of them NaN, infinities, signed zeros or ties, tests/gpu/layouts.SPECIAL);
    `indices` names the tensors of indices, with their bound: int64 values in
    [0, bound) (an embedding's rows); `float32` the tensors made float32 whatever the
    op's dtype (an FP8 product's scales), `float8` the ones made float8_e4m3fn (an FP8
    KV cache). A `ScalarType?` argument is given by its torch name ("bfloat16")."""

    values: Mapping[str, Any]
    domain: str | None = None
    indices: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # Tensors made float32 whatever the op's dtype: an FP8 product's scales.
    float32: tuple[str, ...] = ()
    # Tensors made float8_e4m3fn: an FP8 KV cache beside half-type queries.
    float8: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        values = {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in self.values.items()
        }
        shapes = sorted(self._shapes())
        return {
            "values": values,
            "shapes": shapes,
            "domain": self.domain,
            "indices": dict(self.indices),
            "float32": list(self.float32),
            "float8": list(self.float8),
        }

    def _shapes(self) -> set[str]:
        return {name for name, value in self.values.items() if isinstance(value, tuple)}


def sample(
    domain: str | None = None,
    indices: Mapping[str, int] | None = None,
    float32: tuple[str, ...] = (),
    float8: tuple[str, ...] = (),
    **values: Any,
) -> Sample:
    return Sample(values, domain, dict(indices or {}), tuple(float32), tuple(float8))


@dataclasses.dataclass(frozen=True)
class Api:
    """The torch function an op is. `signature`: "(Tensor input, *, Tensor? out=None)";
    `reference`: the torch function (dotted name) taking the same arguments, which the
    tests compare with and torch.compile's fake tensors run; `samples`: test calls;
    `wrapper`: the runtime module holding a hand-written function (composite ops);
    `refuse`: a function of the kernel file that refuses, after numbers are converted,
    what torch refuses and the kernel cannot see (sub of bools, say): it is called with
    the kernel's arguments (and `out=`, where it has an `out` parameter: signbit's
    out= of another dtype), and its source goes into the wheel's generated module,
    so it may use only its arguments, `torch`, `math` and builtins;
    `name`: the torch name, the op's by default (a file's kernels may serve more
    functions: matmul is mm's and bmm's); `kernel`: the parameters passed to the
    kernel, in premake's order (by default every parameter but out=, inplace= and
    those that pick a value switch, then the `bound` ones); `bound`: kernel
    parameters this function passes as constants, so that one kernel serves several
    functions (`{"comparison": 2}`: lt of the comparison kernel, which eq and the
    others share: one compile where there were six); `written`: arguments the function writes with
    another argument's values before it computes ({"present_key_slot": "present_key"}:
    a KV cache's new entries into their slots), which a traced call writes as
    `slot.copy_(present)`, in the graph's order, leaving both out of the op."""

    signature: str
    reference: str
    samples: tuple[Sample, ...] = ()
    doc: str = ""
    wrapper: str | None = None
    refuse: Callable[..., None] | None = None
    name: str | None = None
    kernel: tuple[str, ...] | None = None
    # (rtol, atol) by dtype where the tests' defaults do not hold: a reference that
    # reduces in another order (attention's softmax in half types, say).
    tolerance: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    written: Mapping[str, str] = dataclasses.field(default_factory=dict)
    bound: Mapping[str, int | float | bool] = dataclasses.field(default_factory=dict)
    # The op's result in a schema ("(Tensor, Tensor)": an output and its log-sum-exp),
    # and the Tensor arguments it writes in place (a KV cache it appends to), which
    # the schema declares `Tensor(a!)` so that graphs order them.
    returns: str = "Tensor"
    mutates: tuple[str, ...] = ()

    def params(self) -> tuple[Param, ...]:
        return parse(self.signature)


def family(names: Sequence[str], signature: str, code: str, **options: Any) -> tuple[Api, ...]:
    """The functions `names` of one kernel, `torch.<name>` each, each binding kernel
    parameter `code` to its index in `names` (kernels/comparison.py's eq .. ge)."""
    return tuple(
        Api(signature, f"torch.{name}", name=name, bound={code: index}, **options)
        for index, name in enumerate(names)
    )


def parse(signature: str) -> tuple[Param, ...]:
    """The parameters of "(Tensor input, *, Scalar alpha=1)"."""
    inner = signature.strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        raise ValueError(f"signature {signature!r} must be parenthesised")
    params, keyword = [], False
    # Commas inside a list default (rot90's `dims=[0, 1]`) part no parameters.
    pieces = re.split(r",(?![^\[]*\])", inner[1:-1])
    for part in filter(None, (piece.strip() for piece in pieces)):
        if part == "*":
            keyword = True
            continue
        match = _PARAMETER.fullmatch(part)
        if match is None or match["type"] not in _TYPES:
            raise ValueError(f"signature {signature!r}: cannot read {part!r} (types: {_TYPES})")
        default = _REQUIRED if match["default"] is None else ast.literal_eval(match["default"])
        params.append(Param(match["name"], match["type"], default, keyword))
    return tuple(params)


def describe(
    op: str, api: Api, switches: Mapping[str, tuple[str, ...]], module: str
) -> dict[str, Any]:
    """What the wheel needs of `api` (kernel file `module`, switches `switches`), as
    JSON data: the runtime function, the library's overloads and the tests read it."""
    params = api.params()
    names = {param.name: param for param in params}
    name = api.name or op
    _check(name, api, params, switches, module)
    picks = {}
    if api.wrapper is None:  # a wrapper picks its switches by hand
        picks = {switch: _rule(names[switch]) for switch in switches}
    writes = _writes(params)
    kernel = api.kernel
    if kernel is None:
        skipped = {"out", "inplace", *(s for s, rule in picks.items() if rule == "value")}
        kernel = tuple(param.name for param in params if param.name not in skipped)
        kernel += tuple(api.bound)
    return {
        "name": name,
        "op": op,
        "signature": "(" + ", ".join(_python(params)) + ")",
        "params": [
            {"name": p.name, "type": p.type, "keyword": p.keyword, "required": p.required}
            | ({} if p.required else {"default": p.default})
            for p in params
        ],
        "switches": {
            switch: {"rule": rule, "values": list(switches[switch])}
            for switch, rule in picks.items()
        },
        "kernel": list(kernel),
        "bound": dict(api.bound),
        "writes": writes,
        "reference": api.reference,
        "wrapper": api.wrapper,
        "refuse": None if api.refuse is None else _refusal(api.refuse, module, writes),
        "doc": api.doc or f"{api.reference} on prebuilt kernels.",
        "written": dict(api.written),
        "overloads": _overloads(
            name, [p for p in params if p.name not in _copied(api)], writes, api
        ),
        "samples": [sample.as_dict() for sample in api.samples],
        "tolerance": {dtype: list(pair) for dtype, pair in api.tolerance.items()},
    }


def _check(name: str, api: Api, params: tuple[Param, ...], switches: Any, module: str) -> None:
    names = {param.name for param in params}
    if api.wrapper is None:
        missing = set(switches) - names
        if missing:
            raise ValueError(
                f"{module}: switches {sorted(missing)} are picked by no parameter of {name}"
                f"{api.signature}; name a parameter after each switch, or give the op a "
                "wrapper (a hand-written runtime function)"
            )
    for index, sample_ in enumerate(api.samples):
        unknown = set(sample_.values) - names
        if unknown:
            raise ValueError(f"{module}: sample {index} of {name} has unknown {sorted(unknown)}")
    types = {param.name: param.type for param in params}
    clashing = set(api.bound) & names
    if clashing:
        raise ValueError(
            f"{module}: {name} binds {sorted(clashing)}, which are parameters of its "
            "signature: a bound kernel parameter is a constant the caller never passes"
        )
    if api.bound and api.wrapper is not None:
        raise ValueError(f"{module}: {name} has a wrapper, which passes its kernel's arguments")
    for bound, value in api.bound.items():
        if type(value) not in (int, float, bool):
            raise ValueError(f"{module}: {name} binds {bound} to {value!r}: a number or a bool")
    for mutated in api.mutates:
        if types.get(mutated) != "Tensor" or api.written or _writes(params):
            raise ValueError(
                f"{module}: {name} mutates {mutated}: a Tensor parameter of a function "
                "without out=, inplace= or written arguments"
            )
    for written, source in api.written.items():
        if types.get(written) != "Tensor?" or types.get(source) != "Tensor?":
            raise ValueError(
                f"{module}: {name} writes {written} with {source}: both must be parameters "
                "of type Tensor? (given together or not at all)"
            )


# What a refusal's source may use besides its arguments, in the generated module.
_REFUSAL_GLOBALS = {"torch", "math"}


def _refusal(
    function: Callable[..., None], module: str, writes: str | None
) -> dict[str, str | bool]:
    """A refusal as the wheel gets it: its name, its source, checked to need nothing of
    the kernel file (the names it reads are its own, `_REFUSAL_GLOBALS` or builtins),
    and whether it is given the function's out= (an `out` parameter)."""
    takes_out = "out" in inspect.signature(function).parameters
    if takes_out and writes != "out":
        raise ValueError(
            f"{module}: refusal {function.__name__} takes out, which its function has not"
        )
    source = textwrap.dedent(inspect.getsource(function))
    tree = ast.parse(source)
    bound = {function.__name__, *_REFUSAL_GLOBALS, *dir(builtins)}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    used = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound
    }
    if used:
        raise ValueError(
            f"{module}: refusal {function.__name__} uses {sorted(used)}; it runs in the "
            f"wheel without the kernel file: only its arguments, {sorted(_REFUSAL_GLOBALS)} "
            "and builtins"
        )
    return {"name": function.__name__, "source": source, "out": takes_out}


def _copied(api: Api) -> set[str]:
    """The parameters a traced call turns into copies before the op (`Api.written`)."""
    return {*api.written, *api.written.values()}


def _rule(param: Param) -> str:
    """How `param` picks the switch of its name."""
    if param.type == "Tensor|Number":
        return "kind"
    if param.type == "Tensor?":
        return "given"
    if param.type in ("str", "str?"):
        return "value"
    raise ValueError(f"parameter {param.name} ({param.type}) cannot pick a switch")


# The parameters that say where a result goes, by type: torch's out= and inplace=.
_WRITERS = {"out": "Tensor?", "inplace": "bool"}


def _writes(params: tuple[Param, ...]) -> str | None:
    for param in params:
        if _WRITERS.get(param.name) == param.type:
            return param.name
    return None


def _python(params: tuple[Param, ...]) -> list[str]:
    parts, starred = [], False
    for param in params:
        if param.keyword and not starred:
            parts.append("*")
            starred = True
        parts.append(param.python)
    return parts


def _schema(params: Sequence[Param], kind: str | None, form: str | None, api: Api) -> str:
    """A torch.library schema of `params`, less the public function's out= and
    inplace parameters (the overload is the form); `kind` the type a `Tensor|Number`
    parameter takes in this overload; `form` "out" or "inplace" for the forms that
    write a tensor (and return it: `Tensor(a!)`)."""
    parts, starred = [], False
    for param in params:
        if param.name in _WRITERS and _WRITERS[param.name] == param.type:
            continue
        type_ = {"Tensor|Number": kind, "Tensor|Number?": f"{kind}?", "int[]": "SymInt[]"}.get(
            param.type, param.type
        )
        if form == "inplace" and param.name == "input":
            type_ = "Tensor(a!)"
        if param.name in api.mutates:
            type_ = f"Tensor({'abcdefgh'[api.mutates.index(param.name)]}!)"
        if param.keyword and not starred:
            parts.append("*")
            starred = True
        default = "" if param.required else f"={param.default!r}"
        parts.append(f"{type_} {param.name}{default}")
    if form == "out":
        parts.extend(["Tensor(a!) out"] if starred else ["*", "Tensor(a!) out"])
    return f"({', '.join(parts)}) -> {'Tensor(a!)' if form else api.returns}"


def _overloads(
    name: str, params: list[Param], writes: str | None, api: Api
) -> list[dict[str, str | None]]:
    """torch's overloads of the op: by the kind of its Tensor|Number arguments, which
    take numbers or tensors together, each with its out= form (`.Tensor`, `.Scalar`,
    `.out`, `.Scalar_out`; where the kinds are optional, as clamp's bounds, torch's
    `default`, `.out`, `.Tensor`, `.Tensor_out`), or the in-place form (`name_`)."""
    kinds = [param for param in params if param.type.startswith("Tensor|Number")]
    if not kinds:
        forms = [("default", None, "out")]
    elif all(param.type.endswith("?") for param in kinds):
        forms = [("default", "Scalar", "out"), ("Tensor", "Tensor", "Tensor_out")]
    else:
        forms = [("Tensor", "Tensor", "out"), ("Scalar", "Scalar", "Scalar_out")]
    found: list[dict[str, str | None]] = []
    for overload, kind, out in forms:
        found.append(
            {
                "name": overload,
                "kind": kind,
                "writes": None,
                "schema": _schema(params, kind, None, api),
            }
        )
        if writes == "out":
            found.append(
                {
                    "name": out,
                    "kind": kind,
                    "writes": "out",
                    "schema": _schema(params, kind, "out", api),
                }
            )
    if writes == "inplace":
        schema = _schema(params, None, "inplace", api)
        found.append({"name": "_", "kind": None, "writes": "inplace", "schema": schema})
    return found
