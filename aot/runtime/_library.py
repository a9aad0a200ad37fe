"""Every public function as an op of the torch.library namespace `ntops_prebuilt`, so
that torch.compile, torch.export and FakeTensorMode see ordinary torch ops.

Eager calls on plain tensors never come here: the public functions launch directly,
as they always did (a torch.library op costs 6-11 us of dispatch per call, more than
a whole launch). Two kinds of call are sent to the ops instead, by `traced`:
- while Dynamo traces (torch.compile, strict torch.export), where
  `torch.compiler.is_dynamo_compiling()` is true: the graph then holds the op;
- a tensor subclass that overrides __torch_dispatch__ (a FakeTensor under
  FakeTensorMode or non-strict torch.export, a functional tensor, a wrapper such as
  DTensor): the launcher raises `Traced` for it, and the subclass gets the op, whose
  CUDA implementation is the public function again, on plain tensors.

Each op's overloads (`.Tensor`, `.Scalar`, `.out`, `_` for in-place) and schemas are
its declaration's (`Api`, rendered into `_ops.APIS` by the one generator of
aot/declare/api.py), with what it writes (`Tensor(a!)`; arguments it writes with
another's values, a KV cache's slots, become copies before the op). Its fake
implementation is its declared reference, torch's own op where one exists, so shapes,
dtypes and strides are torch's; a wrapper module gives another with `@fake(name)`, and
an implementation other than the public function with `@implementation(name)`.
This module is the mechanism only: nothing in it names an op. Importing it imports no
compiler (torch._dynamo, inductor): only torch.library.
"""

import enum
import functools
import importlib

import torch

from . import _C, _ops
from ._C import SubclassError

NAMESPACE = "ntops_prebuilt"
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
_ROUTES = {}
_FAKES = {}  # function name -> the fake a wrapper module gave (`fake`)
_IMPLEMENTATIONS = {}  # function name -> the op's implementation a wrapper gave
# Constant True while Dynamo traces; a call that returns False otherwise.
compiling = torch.compiler.is_dynamo_compiling


def traced(name):
    """The function that calls op `name` with a public function's arguments."""
    return _ROUTES[name]


def routed(name):
    """Decorate public function `name`: calls while Dynamo traces, and calls the
    launcher refuses with SubclassError, go to its op (see the module's doc). The hot
    element-wise functions spell the same two lines out instead of paying this
    wrapper's call."""

    def decorate(function):
        @functools.wraps(function)
        def public(*args, **kwargs):
            if compiling():
                return _ROUTES[name](*args, **kwargs)
            try:
                return function(*args, **kwargs)
            except SubclassError:
                return _ROUTES[name](*args, **kwargs)

        return public

    return decorate


def fake(name):
    """Decorate the fake implementation of function `name`'s ops, where its declared
    reference cannot be one (a reference that takes other arguments, or that would not
    refuse what the function refuses): called as the public function is, with out=
    for out= overloads."""

    def decorate(function):
        _FAKES[name] = function
        return function

    return decorate


def implementation(name):
    """Decorate the CUDA implementation of function `name`'s ops, where the public
    function cannot be it: one whose result takes forms no schema has (max: a tensor
    without `dim`, values and indices with it; its op returns both, always). Called
    as the public function is, with out= for out= overloads."""

    def decorate(function):
        _IMPLEMENTATIONS[name] = function
        return function

    return decorate


def _define(name, schema, public, fake, writes=None):
    """Op `name` (with its overload) of `schema`: its CUDA implementation calls the
    public function (`public(*args, **kwargs)` in the schema's argument order), its
    fake one is `fake`. An out= or in-place form (`writes`) returns nothing, as
    functionalization requires of custom ops; its route returns the written tensor, as
    the public function does. An op that writes arguments it declares mutated
    (`Api.mutates`: a KV cache) returns its own results. An op may not
    return one of its inputs (a dropout that drops nothing returns its input): it
    returns a copy."""
    if writes:
        schema = schema.rsplit("->", 1)[0] + "-> ()"
        public, fake = _returning_nothing(public), _returning_nothing(fake)
    else:
        public = _not_aliasing(public)
    _LIBRARY.define(f"{name}{schema}")
    _LIBRARY.impl(name, public, "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)


def _not_aliasing(function):
    def call(*args, **kwargs):
        result = function(*args, **kwargs)
        inputs = (*args, *kwargs.values())
        return result.clone() if any(result is value for value in inputs) else result

    return call


def _returning_nothing(function):
    def call(*args, **kwargs):
        function(*args, **kwargs)

    return call


def _op(name):
    return getattr(torch.ops.ntops_prebuilt, name)


# torch._C._increment_version as a function of a tuple of tensors, from the launcher
# (which asks which argument this torch's takes, and moves a launch's outputs with it).
increment_versions = _C.increment_versions


def _written(nothing, tensor):
    """`tensor`, after an op that wrote it and returned nothing (`nothing`). A tensor
    subclass ran the op on what it wraps: its own version counter moves here, as
    torch's in-place ops move it (a graph being traced keeps its own account)."""
    if not compiling():
        increment_versions((tensor,))
    return tensor


def register(nt):
    """Define every declared function's ops (`_ops.APIS`), each overload running the
    public function of `nt` and faked by its reference (or the wrapper's `fake`), and
    the route of the function's traced calls to them."""
    for api in _ops.APIS:
        _declared(api, getattr(nt, api["name"]))


def _reference(dotted):
    """The torch function at `dotted` ("torch.nn.functional.gelu")."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _by_name(function, names):
    """`function` taking arguments `names` in order, passed on by name but the first:
    torch's builtins take some arguments by name only (F.gelu's approximate)."""

    def call(first, *args, **kwargs):
        return function(first, **dict(zip(names[1:], args, strict=False)), **kwargs)

    return call


def _inplace(function):
    return lambda input, *args, **kwargs: function(input, *args, inplace=True, **kwargs)


def _declared(api, public):
    """The overloads `api` declares (`api.describe`), each running `public` and faked
    by the wrapper's fake or the torch function it is, and the route of `public`'s
    traced calls to them."""
    name = api["name"]
    names = [p["name"] for p in _op_params(api)]
    twin = _FAKES.get(name) or _by_name(_reference(api["reference"]), names)
    public = _IMPLEMENTATIONS.get(name, public)
    for overload in api["overloads"]:
        if overload["writes"] == "inplace":
            _define(f"{name}_", overload["schema"], _inplace(public), _inplace(twin), "inplace")
        elif overload["name"] == "default":
            _define(name, overload["schema"], public, twin, overload["writes"])
        else:
            label = f"{name}.{overload['name']}"
            _define(label, overload["schema"], public, twin, overload["writes"])
    _ROUTES[name] = _route(api)


def _op_params(api):
    """The parameters an op takes: the function's, less out=/inplace= (the overload
    says) and the arguments a traced call turns into copies (`Api.written`)."""
    copied = {*api["written"], *api["written"].values()}
    return [p for p in api["params"] if p["name"] != api["writes"] and p["name"] not in copied]


def _route(api):
    """A public function's arguments to the overload torch would pick: by the kind of
    its Tensor|Number arguments (any tensor picks the tensor overload), with out= or
    in place; the arguments it writes with others' values first, as copies."""
    name, writes = api["name"], api["writes"]
    params = _op_params(api)
    kinds = [p["name"] for p in params if p["type"].startswith("Tensor|Number")]
    optional = all(p["type"].endswith("?") for p in params if p["name"] in kinds)
    bind = _binder(name, api["params"])

    def route(*args, **kwargs):
        values = {key: _plain(value) for key, value in bind(args, kwargs).items()}
        _copy_written(name, api["written"], values)
        written = values[writes] if writes else None
        positional = [values[p["name"]] for p in params if not p["keyword"]]
        keywords = {p["name"]: values[p["name"]] for p in params if p["keyword"]}
        if writes == "inplace" and written:
            return _written(_op(f"{name}_").default(*positional, **keywords), positional[0])
        tensor = any(isinstance(values[kind], torch.Tensor) for kind in kinds)
        packet = _op(name)
        if writes == "out" and written is not None:
            out = (
                (packet.Tensor_out if tensor else packet.out)
                if optional
                else (packet.out if tensor else packet.Scalar_out)
            )
            return _written(out(*positional, **keywords, out=written), written)
        if not kinds:
            overload = packet.default
        elif optional:
            overload = packet.Tensor if tensor else packet.default
        else:
            overload = packet.Tensor if tensor else packet.Scalar
        return overload(*positional, **keywords)

    return route


_MISSING = object()


def _binder(name, params):
    """`bind(args, kwargs)`: a call's arguments by parameter name, defaults filled in,
    as inspect.Signature.bind gives them, with its TypeErrors. Not a Signature: Dynamo
    traces this, and reading a Signature's parameters (a mappingproxy) breaks the graph
    once the traced program has mutated a dict it was given, as transformers' models do
    (`can_return_tuple` pops the compiled frame's kwargs): Dynamo cannot tell whether
    the proxy is of that dict (issue 33's first GPU run: a static cache's compiled decode
    broke at its first rms_norm for every family on transformers 4.56.2, and for Gemma 2
    and 3 on 5.24.0)."""
    order = tuple((p["name"], p["keyword"], p.get("default", _MISSING)) for p in params)
    positional = tuple(label for label, keyword, _ in order if not keyword)

    def bind(args, kwargs):
        if len(args) > len(positional):
            raise TypeError(
                f"{name}() takes {len(positional)} positional arguments but {len(args)} were given"
            )
        values = dict(zip(positional, args, strict=False))
        for label, value in kwargs.items():
            if label in values:
                raise TypeError(f"{name}() got multiple values for argument {label!r}")
            values[label] = value
        bound = {}
        for label, _, default in order:
            value = values.pop(label, default)
            if value is _MISSING:
                raise TypeError(f"{name}() missing a required argument: {label!r}")
            bound[label] = value
        if values:
            raise TypeError(f"{name}() got an unexpected keyword argument {next(iter(values))!r}")
        return bound

    return bind


def _plain(value):
    """An enum member (torch's CausalVariant, say) as the number a schema takes."""
    return value.value if isinstance(value, enum.Enum) else value


def _copy_written(name, written, values):
    """`Api.written`: each argument written with another's values, the two given
    together or not at all; a graph sees the copies (what torch's own models do), then
    the op, and functionalization keeps their order."""
    for target, source in written.items():
        if (values[target] is None) != (values[source] is None):
            raise ValueError(f"{name}: give {source} and {target} together")
        if values[target] is not None:
            values[target].copy_(values[source])
