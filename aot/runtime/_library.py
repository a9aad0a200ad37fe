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

import torch
import torch.nn.functional as F

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


def _version_bumper():
    """torch._C._increment_version as a function of a tuple of tensors: torch 2.11 takes
    only an iterable, 2.4 only a tensor, 2.15 either; asked once, of a scratch tensor."""
    increment = torch._C._increment_version
    try:
        increment((torch.empty(0),))
    except (RuntimeError, TypeError):
        return lambda tensors: [increment(tensor) for tensor in tensors]
    return increment


increment_versions = _version_bumper()


def _written(nothing, tensor):
    """`tensor`, after an op that wrote it and returned nothing (`nothing`). A tensor
    subclass ran the op on what it wraps: its own version counter moves here, as
    torch's in-place ops move it (a graph being traced keeps its own account)."""
    if not compiling():
        increment_versions((tensor,))
    return tensor


def register(nt):
    """Define every op of `nt` (the runtime's public functions)."""
    _unary_ops(nt)
    _binary_ops(nt)
    _activations(nt)
    _rows(nt)
    _products(nt)
    _attention(nt)


# ---- element-wise -------------------------------------------------------------------

UNARY = ("abs", "neg", "exp", "rsqrt", "sin", "cos", "sigmoid", "tanh", "bitwise_not")


def _unary_ops(nt):
    for name in UNARY:
        public, twin = getattr(nt, name), getattr(torch, name)
        _define(name, "(Tensor input) -> Tensor", public, twin)
        _define(
            f"{name}.out",
            "(Tensor input, *, Tensor(a!) out) -> Tensor(a!)",
            public,
            lambda input, *, out, twin=twin: twin(input, out=out),
        )

        def route(input, *, out=None, name=name):
            packet = _op(name)
            if out is None:
                return packet.default(input)
            return _written(packet.out(input, out=out), out)

        _ROUTES[name] = route
    for name in ("isnan", "isinf"):
        _define(name, "(Tensor input) -> Tensor", getattr(nt, name), getattr(torch, name))
        _ROUTES[name] = lambda input, name=name: _op(name).default(input)


# name: (the second argument's name, the schema of its keyword arguments)
BINARY = {
    "add": ("other", "Scalar alpha=1"),
    "sub": ("other", "Scalar alpha=1"),
    "mul": ("other", ""),
    "div": ("other", "str? rounding_mode=None"),
    "pow": ("exponent", ""),
    **dict.fromkeys(("eq", "ne", "lt", "le", "gt", "ge"), ("other", "")),
    **dict.fromkeys(("bitwise_and", "bitwise_or"), ("other", "")),
}


def _binary_ops(nt):
    for name, (second, keywords) in BINARY.items():
        public, twin = getattr(nt, name), getattr(torch, name)
        extra = f", *, {keywords}" if keywords else ""
        with_out = f", *, {keywords}, Tensor(a!) out" if keywords else ", *, Tensor(a!) out"
        for overload, kind in (("Tensor", "Tensor"), ("Scalar", "Scalar")):
            _define(
                f"{name}.{overload}",
                f"(Tensor input, {kind} {second}{extra}) -> Tensor",
                public,
                twin,
            )
            out = "out" if overload == "Tensor" else "Scalar_out"
            _define(
                f"{name}.{out}",
                f"(Tensor input, {kind} {second}{with_out}) -> Tensor(a!)",
                public,
                twin,
            )

        def route(input, other, *, out=None, name=name, **keywords):
            packet = _op(name)
            tensor = isinstance(other, torch.Tensor)
            if out is None:
                return (packet.Tensor if tensor else packet.Scalar)(input, other, **keywords)
            written = (packet.out if tensor else packet.Scalar_out)(
                input, other, **keywords, out=out
            )
            return _written(written, out)

        _ROUTES[name] = route
    _clamp(nt)


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


def _activations(nt):
    for name, twin in (("relu", F.relu), ("silu", F.silu)):
        public = getattr(nt, name)
        _define(name, "(Tensor input) -> Tensor", public, twin)
        _define(
            f"{name}_",
            "(Tensor(a!) input) -> Tensor(a!)",
            lambda input, public=public: public(input, inplace=True),
            lambda input: input,
        )
        _ROUTES[name] = lambda input, inplace=False, name=name: (
            _written(_op(f"{name}_").default(input), input) if inplace else _op(name).default(input)
        )
    _define(
        "gelu",
        "(Tensor input, str approximate='none') -> Tensor",
        nt.gelu,
        lambda input, approximate="none": F.gelu(input, approximate=approximate),
    )
    _ROUTES["gelu"] = lambda input, approximate="none": _op("gelu").default(input, approximate)

    def silu_mul_fake(input, other, *, out=None):
        if not input.dtype.is_floating_point:  # as torch's silu
            raise NotImplementedError(f"silu_mul: not implemented for {input.dtype}")
        return torch.mul(input, other, out=out)

    _define("silu_mul", "(Tensor input, Tensor other) -> Tensor", nt.silu_mul, silu_mul_fake)
    _define(
        "silu_mul.out",
        "(Tensor input, Tensor other, *, Tensor(a!) out) -> Tensor(a!)",
        nt.silu_mul,
        silu_mul_fake,
    )
    _ROUTES["silu_mul"] = lambda input, other, *, out=None: (
        _op("silu_mul").default(input, other)
        if out is None
        else _written(_op("silu_mul").out(input, other, out=out), out)
    )
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


# ---- rows ---------------------------------------------------------------------------


def _rows(nt):
    _define(
        "softmax",
        "(Tensor input, int dim, ScalarType? dtype=None) -> Tensor",
        nt.softmax,
        lambda input, dim, dtype=None: torch.softmax(input, dim, dtype=dtype),
    )
    _ROUTES["softmax"] = lambda input, dim, dtype=None: _op("softmax").default(input, dim, dtype)
    _define(
        "rms_norm",
        "(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor",
        nt.rms_norm,
        F.rms_norm,
    )
    _ROUTES["rms_norm"] = lambda input, normalized_shape, weight=None, eps=None: _op(
        "rms_norm"
    ).default(input, list(normalized_shape), weight, eps)
    _define(
        "layer_norm",
        "(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None,"
        " float eps=1e-05) -> Tensor",
        nt.layer_norm,
        F.layer_norm,
    )
    _ROUTES["layer_norm"] = lambda input, normalized_shape, weight=None, bias=None, eps=1e-5: _op(
        "layer_norm"
    ).default(input, list(normalized_shape), weight, bias, eps)


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
    from ntops_prebuilt._attention import floating, paired, rope_shapes

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
