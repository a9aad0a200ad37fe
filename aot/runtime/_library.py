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

Each op has torch's overloads (`.Tensor`, `.Scalar`, `.out`, `_` for in-place) and
declares what it writes (`Tensor(a!)`). Its fake implementation is torch's own op
where one exists, so shapes, dtypes and strides are torch's. Importing this module
imports no compiler (torch._dynamo, inductor): only torch.library.
"""

import functools
import importlib
import inspect

import torch

from ntops_prebuilt import _C, _ops
from ntops_prebuilt._C import SubclassError
from ntops_prebuilt._checks import clamp_bounds

NAMESPACE = "ntops_prebuilt"
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
_ROUTES = {}
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


def _define(name, schema, public, fake):
    """Op `name` (with its overload) of `schema`: its CUDA implementation calls the
    public function (`public(*args, **kwargs)` in the schema's argument order), its
    fake one is `fake`. An op that writes an argument (`Tensor(a!)`, an out= or an
    in-place form) returns nothing, as functionalization requires of custom ops; its
    route returns the written tensor, as the public function does."""
    if "!)" in schema:
        schema = schema.rsplit("->", 1)[0] + "-> ()"
        public, fake = _returning_nothing(public), _returning_nothing(fake)
    _LIBRARY.define(f"{name}{schema}")
    _LIBRARY.impl(name, public, "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)


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
    """Define every op of `nt` (the runtime's public functions): by hand those whose
    overloads, fakes or routes torch's rules make special, every other one from its
    declaration."""
    _clamp(nt)
    _dropout(nt)
    _products(nt)
    _attention(nt)
    for api in _ops.APIS:
        if api["name"] not in _ROUTES:
            _declared(api, getattr(nt, api["name"]))


# ---- ordinary ops: overloads and routes from their declarations ----------------------


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
    by the torch function it is, and the route of `public`'s traced calls to them."""
    name = api["name"]
    names = [p["name"] for p in api["params"] if p["name"] != api["writes"]]
    twin = _by_name(_reference(api["reference"]), names)
    for overload in api["overloads"]:
        if overload["writes"] == "inplace":
            _define(f"{name}_", overload["schema"], _inplace(public), _inplace(twin))
        elif overload["name"] == "default":
            _define(name, overload["schema"], public, twin)
        else:
            _define(f"{name}.{overload['name']}", overload["schema"], public, twin)
    _ROUTES[name] = _route(api)


def _route(api):
    """A public function's arguments to the overload torch would pick: by the kind of
    its Tensor|Number argument, with out= or in place."""
    name, writes = api["name"], api["writes"]
    params = [p for p in api["params"] if p["name"] != writes]
    kinds = [s for s, pick in api["switches"].items() if pick["rule"] == "kind"]
    signature = inspect.Signature(
        [
            inspect.Parameter(
                p["name"],
                inspect.Parameter.KEYWORD_ONLY if p["keyword"] else _POSITIONAL,
                default=p.get("default", inspect.Parameter.empty),
            )
            for p in api["params"]
        ]
    )

    def route(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        written = values[writes] if writes else None
        positional = [values[p["name"]] for p in params if not p["keyword"]]
        keywords = {p["name"]: values[p["name"]] for p in params if p["keyword"]}
        if writes == "inplace" and written:
            return _written(_op(f"{name}_").default(*positional, **keywords), positional[0])
        number = bool(kinds) and not isinstance(values[kinds[0]], torch.Tensor)
        packet = _op(name)
        if writes == "out" and written is not None:
            out = packet.Scalar_out if number else packet.out
            return _written(out(*positional, **keywords, out=written), written)
        overload = packet.default if not kinds else packet.Scalar if number else packet.Tensor
        return overload(*positional, **keywords)

    return route


_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def _clamp(nt):
    """clamp's overloads as torch's: number bounds or tensor bounds, each with out=."""

    for overload, kind in (("default", "Scalar"), ("Tensor", "Tensor")):
        bounds = f"Tensor input, {kind}? min=None, {kind}? max=None"
        name = "clamp" if overload == "default" else "clamp.Tensor"
        out = "clamp.out" if overload == "default" else "clamp.Tensor_out"
        _define(name, f"({bounds}) -> Tensor", nt.clamp, torch.clamp)
        _define(out, f"({bounds}, *, Tensor(a!) out) -> Tensor(a!)", nt.clamp, torch.clamp)

    def route(input, min=None, max=None, *, out=None):
        packet = _op("clamp")
        min, max = clamp_bounds(min, max)
        if isinstance(min, torch.Tensor) or isinstance(max, torch.Tensor):
            if out is None:
                return packet.Tensor(input, min, max)
            return _written(packet.Tensor_out(input, min, max, out=out), out)
        if out is None:
            return packet.default(input, min, max)
        return _written(packet.out(input, min, max, out=out), out)

    _ROUTES["clamp"] = route


def _dropout(nt):
    """dropout: its CUDA op returns a copy where nothing is dropped (an op may not
    return its input), its route the input itself, as torch and the function do."""
    _define(
        "dropout",
        "(Tensor input, float p=0.5, bool training=True) -> Tensor",
        lambda input, p=0.5, training=True: (
            nt.dropout(input, p, training).clone()
            if not training or p == 0 or input.numel() == 0
            else nt.dropout(input, p, training)
        ),
        lambda input, p=0.5, training=True: torch.empty_like(input),
    )
    _define(
        "dropout_",
        "(Tensor(a!) input, float p=0.5, bool training=True) -> Tensor(a!)",
        lambda input, p=0.5, training=True: nt.dropout(input, p, training, inplace=True),
        lambda input, p=0.5, training=True: input,
    )

    def dropout(input, p=0.5, training=True, inplace=False):
        if 0 <= p <= 1 and (not training or p == 0 or input.numel() == 0):
            return input  # as torch's dropout and the public function: input itself
        if inplace:
            return _written(_op("dropout_").default(input, p, training), input)
        return _op("dropout").default(input, p, training)

    _ROUTES["dropout"] = dropout


# ---- products -----------------------------------------------------------------------


def _same_dtype(result, out):
    """`result`, where out= has its dtype, as torch's products require of out=."""
    if out.dtype != result.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {result.dtype}, but got {out.dtype}")
    return result


def _products(nt):
    for name, second in (("mm", "mat2"), ("bmm", "mat2"), ("matmul", "other")):
        public, twin = getattr(nt, name), getattr(torch, name)
        _define(name, f"(Tensor input, Tensor {second}) -> Tensor", public, twin)
        _define(
            f"{name}.out",
            f"(Tensor input, Tensor {second}, *, Tensor(a!) out) -> Tensor(a!)",
            public,
            # torch's product without its out= (torch 2.4's fake matmul.out decomposes
            # into a copy_ that reaches for a real device), and torch's rule for out=
            lambda input, other, *, out, twin=twin: _same_dtype(twin(input, other), out),
        )
        _ROUTES[name] = lambda input, other, *, out=None, name=name: (
            _op(name).default(input, other)
            if out is None
            else _written(_op(name).out(input, other, out=out), out)
        )
    keywords = "*, Scalar beta=1, Scalar alpha=1"
    _define(
        "addmm",
        f"(Tensor input, Tensor mat1, Tensor mat2, {keywords}) -> Tensor",
        nt.addmm,
        torch.addmm,
    )
    _define(
        "addmm.out",
        f"(Tensor input, Tensor mat1, Tensor mat2, {keywords}, Tensor(a!) out) -> Tensor(a!)",
        nt.addmm,
        torch.addmm,
    )
    _ROUTES["addmm"] = lambda input, mat1, mat2, *, beta=1, alpha=1, out=None: (
        _op("addmm").default(input, mat1, mat2, beta=beta, alpha=alpha)
        if out is None
        else _written(_op("addmm").out(input, mat1, mat2, beta=beta, alpha=alpha, out=out), out)
    )


# ---- attention ----------------------------------------------------------------------


def _attention(nt):
    # that module imports this one
    from ntops_prebuilt._attention import floating, paired
    from ntops_prebuilt._rotary import rope_shapes

    def fake(query, key, value, *rest):
        floating(query)
        return query.new_empty(query.shape)

    _define(
        "scaled_dot_product_attention",
        "(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0,"
        " bool is_causal=False, float? scale=None, bool enable_gqa=False,"
        " int? causal_variant=None) -> Tensor",
        nt.scaled_dot_product_attention,
        fake,
    )

    def attention(
        query,
        key,
        value,
        attn_mask=None,
        dropout_p=0,
        is_causal=False,
        scale=None,
        enable_gqa=False,
        causal_variant=None,
        present_key=None,
        present_value=None,
        present_key_slot=None,
        present_value_slot=None,
    ):
        # A graph sees the KV-cache writes as the copies they are (what torch's own
        # models do), then the attention: functionalization keeps their order.
        for name, present, slot in (
            ("key", present_key, present_key_slot),
            ("value", present_value, present_value_slot),
        ):
            if paired(present, slot, name):
                slot.copy_(present)
        variant = None if causal_variant is None else int(causal_variant)
        return _op("scaled_dot_product_attention").default(
            query, key, value, attn_mask, float(dropout_p), is_causal, scale, enable_gqa, variant
        )

    _ROUTES["scaled_dot_product_attention"] = attention
    signature = "(Tensor input, Tensor sin_table, Tensor cos_table, bool interleaved=True)"
    _define(
        "rotary_position_embedding",
        f"{signature} -> Tensor",
        nt.rotary_position_embedding,
        lambda input, sin, cos, interleaved=True: (
            rope_shapes(input, sin, cos) or torch.empty_like(input)
        ),
    )
    _define(
        "rotary_position_embedding_",
        signature.replace("Tensor input", "Tensor(a!) input") + " -> Tensor(a!)",
        lambda input, sin, cos, interleaved=True: nt.rotary_position_embedding(
            input, sin, cos, interleaved, inplace=True
        ),
        lambda input, sin, cos, interleaved=True: rope_shapes(input, sin, cos) or input,
    )

    def rotation(input, sin_table, cos_table, interleaved=True, inplace=False):
        if inplace:
            written = _op("rotary_position_embedding_").default(
                input, sin_table, cos_table, interleaved
            )
            return _written(written, input)
        return _op("rotary_position_embedding").default(input, sin_table, cos_table, interleaved)

    _ROUTES["rotary_position_embedding"] = rotation
