"""The ops the fuzz suite (tests/gpu/fuzz.py) calls, as PyTorch's OpInfo database keeps
them: per op, how to draw a random call, torch's answer to it (the reference, with
ntops_prebuilt's signature), the dtypes its kernel is built for (its SPACE, which a
unit test checks) and how closely results must agree.

`REFERENCE` is a module-like namespace of the references: fuzzing it against itself
tests the harness on any machine.
"""

import dataclasses
import math
import types
from collections.abc import Callable, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_dense
from torch._subclasses.fake_tensor import FakeTensor

from tests.calls import resolve
from tests.gpu.fuzz_draw import Draw
from tests.gpu.fuzz_inputs import BOOL, DTYPES, FLOATS, INTEGERS, Operand
from tests.gpu.layouts import BY_NAME
from tests.ops import scaled_dot_product_attention as attention
from tests.ops.scaled_dot_product_attention import CausalVariant
from tests.tolerances import bounds


@dataclasses.dataclass(frozen=True)
class Spec:
    """`draw(d, op)` returns (args, kwargs); `reference` is torch's answer; `dtypes`
    what the op's kernel is built for (`kernel`'s, for ops that route to another's);
    `atol(args, kwargs, precision)` an elementwise error bound for products and
    attention (default: tests/tolerances.py's, with the op's declared `tolerance`);
    `check` "close" or "dropout"; `names` the op names a refusal may give."""

    draw: Callable
    reference: Callable
    dtypes: tuple
    kernel: str | None = None
    atol: Callable | None = None
    check: str = "close"
    names: tuple = ()
    tolerance: Mapping = dataclasses.field(default_factory=dict)


# ---- element-wise -----------------------------------------------------------------


def _unary(d, op):
    dtype = d.principal(SPECS[op].dtypes)
    shape = d.shape()
    x = d.tensor(shape, dtype, domain="positive" if op == "rsqrt" and d.chance(0.5) else None)
    return (x,), _out(d, [x], shape, dtype)


def _predicate(d, op):  # isnan, isinf: no out=
    x = d.tensor(d.shape(), d.principal(SPECS[op].dtypes))
    return (x,), {}


def _activation(d, op):  # relu, silu: (input, inplace=False)
    x = d.tensor(d.shape(), d.principal(SPECS[op].dtypes))
    form = d.pick(("none", "none", "keyword", "positional", "false"))
    if form != "none":
        d.note(f"inplace={form != 'false'}")
    if form == "positional":
        return (x, True), {}
    return (x,), {} if form == "none" else {"inplace": form == "keyword"}


def _gelu(d, op):
    x = d.tensor(d.shape(), d.principal(SPECS[op].dtypes))
    approximate = d.pick(("none", "tanh", "tanh", "none", "fast" if d.chance(0.1) else "tanh"))
    return (x,), {} if d.chance(0.2) else {"approximate": approximate}


def _binary(d, op):
    """add, sub, mul, div, pow, silu_mul, comparisons and bitwise ops: a tensor with
    another tensor (same shape or broadcast), a number, or a 0-dim tensor."""
    dtype = d.principal(SPECS[op].dtypes)
    shape = d.shape()
    x = d.tensor(shape, dtype, domain="positive" if op == "pow" and d.chance(0.5) else None)
    other, result = _other(d, op, x, shape, dtype)
    kwargs = {}
    if op in ("add", "sub") and d.chance(0.4):
        kwargs["alpha"] = d.pick((2, 0.5, -1.5, 0, 1.0, 3))
    if op == "div" and d.chance(0.6):
        kwargs["rounding_mode"] = d.pick(("trunc", "floor", None, "floor", "round"))
    out_dtype = torch.bool if op in COMPARISONS else dtype
    if d.chance(0.04) and shape and shape[0] >= 2 and not x.wrap:
        # torch refuses `add(o, o[:1], out=o)`: the output is what `other` is broadcast
        # from (where both are dense: it cannot tell for other layouts, and lets it race)
        view = d.view_of(x, [("slice", 0, 0, 1, 1)], (1, *shape[1:]))
        if d.dense(x) and d.dense(view):
            d.note("out= is the input, and the other operand a slice of it")
            return (x, view), {**kwargs, "out": x}
    return (x, other), {**kwargs, **_out(d, [x, other], result, out_dtype)}


def _zero_dim(d, kind, dtype, dtypes, shape, what):
    """A 0-dim tensor on the CPU or the device (`kind`), of `dtype` or one of `dtypes`,
    beside a tensor of `dtype` and `shape`; outside the built space where it promotes."""
    other = dtype if d.chance(0.6) else d.pick(dtypes)
    d.note(f"a 0-dim {str(other)[6:]} {what} on the {kind.upper()}")
    d.promotes(dtype, other, shape)
    if kind == "device" and other != dtype:
        d.out_of_space("device tensors of two dtypes")
    return d.tensor((), other, exotic=False, on_cpu=kind == "cpu")


def _other(d, op, x, shape, dtype):
    """The second operand and the result's shape."""
    numbers = op not in ("silu_mul",)
    kinds = {"same": 30, "broadcast": 25, "number": 25 * numbers, "cpu": 8, "device": 5}
    kind = d.weighted(kinds | {"mixed": 4})
    if kind == "number":
        return d.number(dtype, near=x if op in COMPARISONS else None), shape
    if kind in ("cpu", "device"):
        other = _zero_dim(d, kind, dtype, DTYPES, shape, "tensor")
        if kind == "cpu" and not numbers:
            d.out_of_space("a CPU tensor where the kernel takes a device tensor")
        return other, shape
    if kind == "mixed":
        d.out_of_space("tensors of two dtypes promote")
        return d.tensor(shape, d.pick(t for t in DTYPES if t != dtype)), shape
    if kind == "broadcast":
        partner = d.broadcast(shape)
        other = d.tensor(partner, dtype)
        return other, tuple(torch.broadcast_shapes(shape, partner))
    values = None
    if op in COMPARISONS and d.chance(0.5):  # equal elements where a mask says
        mine = d.logical[x].expand(shape)
        fresh = d.values(shape, dtype)
        values = torch.where(torch.rand(shape, generator=d.generator) < 0.5, mine, fresh)
    return d.tensor(shape, dtype, values=values), shape


def _out(d, inputs, shape, dtype, *, in_place=True):
    out = d.out(inputs, shape, dtype, in_place=in_place)
    return {} if out is None else {"out": out}


def _clamp(d, op):
    """Each bound missing, a number, a tensor (broadcast either way: the result may be
    larger than the input), a 0-dim tensor on the CPU or the device, or, outside the
    built space, a tensor of another dtype; out= one time in three."""
    dtype = d.principal(SPECS[op].dtypes)
    shape = d.shape()
    x = d.tensor(shape, dtype)
    bounds, result = [], shape
    kinds = {"none": 25, "number": 35, "same": 15, "broadcast": 15, "cpu": 4, "device": 3}
    for _ in range(2):
        kind = d.weighted(kinds | {"mixed": 3})
        if kind == "none":
            bounds.append(None)
        elif kind == "number":
            bounds.append(d.pick((-0.5, 0.5, 0, 1, -1, 2.5, 1e-3, -3, math.inf, -math.inf)))
            bounds[-1] = math.nan if d.chance(0.06) else bounds[-1]
        elif kind in ("cpu", "device"):
            bounds.append(_zero_dim(d, kind, dtype, FLOATS, result, "bound"))
        elif kind == "mixed":
            d.out_of_space("tensors of two dtypes promote")
            bounds.append(d.tensor(shape, d.pick(t for t in FLOATS if t != dtype)))
        else:
            partner = d.broadcast(shape) if kind == "broadcast" else shape
            bounds.append(d.tensor(partner, dtype))
            result = tuple(torch.broadcast_shapes(result, partner))
    kwargs = _out(d, [x, *bounds], result, dtype) if d.chance(1 / 3) else {}
    if d.chance(0.5):
        return (x, *bounds), kwargs
    named = {name: b for name, b in zip(("min", "max"), bounds, strict=True) if b is not None}
    return (x,), named | kwargs


def _dropout(d, op):
    x = d.tensor(d.shape(), d.principal(SPECS[op].dtypes))
    p = d.pick((0.0, 0.1, 0.3, 0.5, 0.5, 0.9, 1.0, 1.5 if d.chance(0.2) else 0.5))
    training, inplace = d.chance(0.85), d.chance(0.25)
    if d.chance(0.5):
        return (x, p, training, inplace), {}
    return (x,), {"p": p, "training": training, "inplace": inplace}


# ---- rows -------------------------------------------------------------------------


def _softmax(d, op):
    dtype = d.principal(SPECS[op].dtypes)
    shape = d.shape()
    x = d.tensor(shape, dtype)
    ndim = max(len(shape), 1)
    dim = d.rng.randint(-ndim, ndim - 1) if d.chance(0.97) else ndim
    if d.chance(0.15):
        return (x, dim), {"dtype": d.pick((torch.float32, torch.float64, torch.float16))}
    return (x, dim), {}


def _embedding(d, op):
    """Indices of any shape (int64 or int32) in range, a weight of rows in any layout,
    padding_idx now and then. Never an index out of range: torch, the reference, runs
    first and asserts on the device, which ends the process's use of it (a crash the
    fuzz would lay on the wheel); test_functions checks the wheel's zero rows there."""
    dtype = d.principal(SPECS[op].dtypes)
    rows, width = d.rng.randint(1, 300), d.size()
    weight = d.tensor((rows, width), dtype)
    index = d.pick((torch.int64, torch.int64, torch.int32))
    shape = d.shape()
    indices = torch.randint(0, rows, shape, generator=d.generator, dtype=index)
    kwargs = {"padding_idx": d.rng.randint(-rows, rows - 1)} if d.chance(0.2) else {}
    return (d.tensor(shape, index, values=indices), weight), kwargs


def _norm(d, op):
    """rms_norm and layer_norm over 1 to 3 trailing dims, with or without weight and
    bias, default or given eps."""
    dtype = d.principal(SPECS[op].dtypes)
    shape = d.shape(low=1)
    x = d.tensor(shape, dtype, specials="finite-range")
    count = d.rng.randint(1, min(3, len(shape)))
    normalized = shape[len(shape) - count :]
    if d.chance(0.03):
        normalized = (*normalized[:-1], normalized[-1] + 1)  # torch raises
    given = tuple(normalized) if d.chance(0.7) else list(normalized)  # torch takes no int
    vectors = [
        d.tensor(normalized, dtype, specials="finite-range") if d.chance(0.6) else None
        for _ in range(1 if op == "rms_norm" else 2)
    ]
    eps = d.pick((None, None, 1e-5, 1e-6, 0.1, 0.0)) if op == "rms_norm" else None
    if op == "layer_norm":
        eps = d.pick((1e-5, 1e-5, 1e-6, 0.1))
    return (x, given, *vectors), {} if eps is None else {"eps": eps}


def _layer_norm_atol(args, kwargs, precision):
    """(x - mean) * rstd: the mean's rounding, an ulp or so of the row's largest
    element, comes out scaled by rstd, which is 1 / sqrt(eps) for a constant row:
    torch's Welford kernel and the kernel's two passes each leave their own (a row of
    ~100.0 with eps 0.1 came out as +-2.4e-5 in torch, 0 here). The bound is the
    per-dtype one, or 4 ulps of fp32 of that, times the largest weight."""
    x, normalized, weight = args[0], args[1], (args[2] if len(args) > 2 else None)
    floor = bounds(x.dtype)[1]
    if x.numel() == 0:
        return floor
    rows = torch.nan_to_num(x.double().flatten(-len(normalized)), nan=0.0, posinf=0.0, neginf=0.0)
    eps = kwargs.get("eps", 1e-5)
    rstd = (rows.var(-1, unbiased=False) + eps).rsqrt()
    scale = (rows.abs().amax(-1) * rstd).amax().item()
    if weight is not None and weight.numel():
        scale *= torch.nan_to_num(weight.abs().double(), nan=0.0, posinf=0.0).amax().item()
    return max(floor, 4 * 2**-24 * scale)


# ---- products ---------------------------------------------------------------------


def _matrix(d, shape, dtype):
    return d.tensor(shape, dtype, specials="finite-range")


def _precision(d, dtype):
    if dtype == torch.float32 and d.chance(0.3):
        d.precision = "high"  # TF32, on both sides


def _mm(d, op):
    dtype = d.principal(SPECS[op].dtypes)
    batch = (d.rng.randint(0, 5),) if op == "bmm" else ()
    m, k, n = d.size(long=False), d.size(), d.size(long=False)
    a = _matrix(d, (*batch, m, k), dtype)
    b = _matrix(d, (*batch, k + (d.chance(0.03)), n), dtype)
    _precision(d, dtype)
    return (a, b), _out(d, [a, b], (*batch, m, n), dtype, in_place=False)


def _addmm(d, op):
    dtype = d.principal(SPECS[op].dtypes)
    m, k, n = d.size(long=False), d.size(), d.size(long=False)
    bias = d.pick(((m, n), (n,), (1, n), (m, 1), (), (1, 1)))
    inputs = [_matrix(d, shape, dtype) for shape in (bias, (m, k), (k, n))]
    kwargs = {}
    if d.chance(0.5):
        kwargs["beta"] = d.pick((0, 0.5, -1, 2, 1.0))
    if d.chance(0.5):
        kwargs["alpha"] = d.pick((0.5, -1, 2, 1.0))
    _precision(d, dtype)
    return tuple(inputs), kwargs | _out(d, inputs, (m, n), dtype, in_place=False)


def _matmul(d, op):
    """Vectors, matrices and batches of them, with broadcast batch dims."""
    dtype = d.principal(SPECS[op].dtypes)
    m, k, n = d.size(long=False), d.size(), d.size(long=False)
    left, right = d.pick((1, 2, 2, 3, 4)), d.pick((1, 2, 2, 3, 4))
    batch = tuple(min(size, 6) for size in d.shape(low=0, high=2))
    if batch:
        k = min(k, 256)  # a long K in batches: over a million elements
    partner = d.broadcast(batch)
    a_shape = (k,) if left == 1 else (*_trailing(batch, left - 2), m, k)
    b_shape = (k,) if right == 1 else (*_trailing(partner, right - 2), k, n)
    if d.chance(0.03):
        a_shape = ()  # torch raises
    a, b = _matrix(d, a_shape, dtype), _matrix(d, b_shape, dtype)
    try:
        meta = [torch.empty(shape, device="meta") for shape in (a_shape, b_shape)]
        result = torch.matmul(*meta)
    except RuntimeError:
        return (a, b), {}
    _precision(d, dtype)
    return (a, b), _out(d, [a, b], result.shape, dtype, in_place=False)


def _trailing(shape, count):
    return shape[max(len(shape) - count, 0) :]


def _product_atol(args, kwargs, precision):
    """|ours - torch| <= atol + rtol |torch|: with fp32 accumulation over K terms each
    side errs by at most K u (|a| @ |b|), u = 2^-24; TF32 inputs (rounded by Triton,
    truncated by cuBLAS: 2^-10 each at worst) add up to 2^-8 (|a| @ |b|) more."""
    *bias, a, b = args
    if not a.dtype.is_floating_point:
        return 0  # compared exactly
    k = a.shape[-1]
    per_term = 2 * k * 2**-24 + (2**-8 if precision != "highest" else 0)
    magnitude = torch.matmul(a.abs().double(), b.abs().double()) * abs(kwargs.get("alpha", 1))
    if bias and kwargs.get("beta", 1) != 0:
        magnitude = magnitude + abs(kwargs.get("beta", 1)) * bias[0].abs().double()
        per_term += 2**-24
    return 1.5 * per_term * magnitude + torch.finfo(a.dtype).smallest_normal


# ---- attention --------------------------------------------------------------------

HEAD_DIMS = (32, 64, 96, 128, 256)


def _attention(d, op):
    dtype = d.principal(SPECS[op].dtypes)
    batch, heads_kv, group = d.rng.randint(1, 3), d.rng.randint(1, 4), d.pick((1, 1, 2, 4))
    seq_q, seq_kv = d.rng.randint(1, 70), d.rng.randint(1, 70)
    head_dim = d.pick(HEAD_DIMS) if d.chance(0.95) else d.pick((48, 80))
    if head_dim not in HEAD_DIMS:
        d.out_of_space(f"head_dim {head_dim}")

    def qkv(heads, seq):
        return d.tensor((batch, heads, seq, head_dim), dtype, specials=None, scale=1.0)

    query = qkv(heads_kv * group, seq_q)
    args, kwargs = [query], {}
    if group > 1 or d.chance(0.3):
        kwargs["enable_gqa"] = True
    if d.chance(0.2):
        args += _cache(d, kwargs, (batch, heads_kv, seq_kv, head_dim), dtype)
    else:
        args += [qkv(heads_kv, seq_kv), qkv(heads_kv, seq_kv)]
    mask = d.pick(("none", "none", "causal", "bool", "float"))
    if mask == "causal":
        kwargs["is_causal"] = True
        if seq_q <= seq_kv and d.chance(0.5):
            kwargs["causal_variant"] = CausalVariant.LOWER_RIGHT
    elif mask != "none":
        kwargs["attn_mask"] = _mask(d, (batch, heads_kv * group, seq_q, seq_kv), mask, dtype)
    if d.chance(0.3):
        kwargs["scale"] = d.pick((0.05, 0.125, 0.3, 1.0))
    return tuple(args), kwargs


def _cache(d, kwargs, shape, dtype):
    """KV caches with room past `shape`'s positions, new entries and their slots: the
    caches' last positions (where the kernel writes them) or others (copied first).
    Returns the attended (key, value): views of the caches."""
    batch, heads, seq, head_dim = shape
    new = d.rng.randint(1, min(seq, 20))
    position = seq - new if d.chance(0.7) else d.rng.randint(0, seq - new)
    entries = (batch, heads, new, head_dim)
    attended = []
    for name in ("key", "value"):
        room = (batch, heads, seq + d.rng.randint(0, 9), head_dim)
        cache = d.tensor(room, dtype, layout="plain", specials=None, scale=1.0, exotic=False)
        attended.append(d.view_of(cache, [("slice", 2, 0, seq, 1)], shape))
        slot = [("slice", 2, position, position + new, 1)]
        kwargs[f"present_{name}_slot"] = d.view_of(cache, slot, entries)
        kwargs[f"present_{name}"] = d.tensor(entries, dtype, specials=None, scale=1.0)
    d.note(f"a KV cache: {new} new entries at position {position} of {seq}")
    return attended


def _mask(d, full, kind, dtype):
    """A bool or float mask that broadcasts to `full`, every row keeping a key."""
    shape = [size if d.chance(0.5) else 1 for size in full]
    shape[-1] = full[-1]
    shape = shape[d.pick((0, 0, 1, 2)) :]
    keep = torch.rand(shape, generator=d.generator) < 0.7
    keep[..., d.rng.randrange(full[-1])] = True
    if kind == "bool" or not dtype.is_floating_point:
        return d.tensor(shape, torch.bool, values=keep, exotic=False)
    bias = d.values(shape, dtype, scale=1.0, specials=None)
    bias = bias.masked_fill(~keep, -math.inf)
    return d.tensor(shape, dtype, values=bias, exotic=False)


def _attention_atol(args, kwargs, precision):
    """Outputs are weighted means of value rows: errors scale with the largest."""
    query, _, value = args
    values = [value, kwargs.get("present_value", value)]
    largest = torch.stack([v.abs().double().amax() for v in values]).amax()
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(query.dtype, 1e-4) * largest


def matmul(input, other, *, out=None):
    """torch.matmul; where its out= path cannot fold a strided `out` (it raises a size
    mismatch for some views), the product copied into `out`, as torch's semantics are."""
    try:
        return torch.matmul(input, other, out=out)
    except RuntimeError:
        if out is None:
            raise
        result = torch.matmul(input, other)
        if (result.shape, result.dtype, result.device) != (out.shape, out.dtype, out.device):
            raise
        return out.copy_(result)


# ---- rotary position embedding ------------------------------------------------------


def _rope(d, op):
    dtype = d.principal(SPECS[op].dtypes)
    batch, seq, heads = d.rng.randint(1, 3), d.rng.randint(1, 40), d.rng.randint(1, 8)
    head_dim = d.pick((2, 6, 64, 128, 2 * d.rng.randint(1, 64)))
    if d.chance(0.03):
        head_dim += 1  # odd: refused, as the reference does
    x = d.tensor((batch, seq, heads, head_dim), dtype, specials="finite-range")
    rows = seq + 1 if d.chance(0.03) else seq  # torch-side refusal too
    tables = [d.tensor((rows, head_dim // 2), dtype, specials="finite-range") for _ in "sc"]
    kwargs = {}
    if d.chance(0.5):
        kwargs["interleaved"] = d.chance(0.5)
    if d.chance(0.3):
        kwargs["inplace"] = True
        d.note("inplace=True")
    return (x, *tables), kwargs


def _rope_atol(args, kwargs, precision):
    """Each output is x0 cos - x1 sin (or its twin): two products whose difference can
    cancel, so the error bound scales with the terms, not the result (fp32: a few ulps
    of the larger, the kernel's fused multiply-adds rounding once where torch rounds
    twice; half types: the per-dtype tolerance of the terms)."""
    x, *tables = args
    if x.numel() == 0 or any(t.numel() == 0 for t in tables):
        return 0
    if not all(t.dtype.is_floating_point for t in (x, *tables)):
        return 0  # outside the built space (a bool rotation, say): exact

    def finite(t):  # NaN and inf compare as such; they set no bound
        return torch.nan_to_num(t.abs().double(), nan=0.0, posinf=0.0).amax()

    largest = finite(x) * max(finite(t) for t in tables)
    per_unit = 4 * 2**-24 if x.dtype == torch.float32 else bounds(x.dtype)[1]
    return per_unit * largest


def rotary_position_embedding(input, sin_table, cos_table, interleaved=True, inplace=False):
    """ntops_prebuilt's rotation (torch has none): pairs (x[2i], x[2i + 1]) if
    interleaved, else (x[i], x[i + head_dim / 2]), rotated in fp32, rounded once."""
    if input.ndim != 4 or input.shape[-1] % 2:
        raise ValueError(f"rotary_position_embedding: input {list(input.shape)} is not 4-D even")
    half = input.shape[-1] // 2
    for table in (sin_table, cos_table):
        if tuple(table.shape) != (input.shape[1], half):
            raise ValueError(f"rotary_position_embedding: a table is {list(table.shape)}")
    x = input.float()
    x0, x1 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :half], x[..., half:])
    sin, cos = (table.float()[None, :, None, :] for table in (sin_table, cos_table))
    y0, y1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    out = torch.stack((y0, y1), -1).flatten(-2) if interleaved else torch.cat((y0, y1), -1)
    return input.copy_(out) if inplace else out.to(input.dtype)


def silu_mul(input, other, *, out=None):
    """silu(input) * other computed in fp32 and rounded once, as the fused op is
    documented to (torch's silu then mul rounds silu to a half type first: silu(-64)
    becomes -0, and -0 * inf is NaN where the fused op gives -inf); refusing an out=
    that partly overlaps input as torch's own element-wise ops do."""
    if out is not None and _partial_overlap(out, input):
        raise RuntimeError("silu_mul: out= partly overlaps input (as torch refuses)")
    half = input.dtype in (torch.float16, torch.bfloat16)
    gate = F.silu(input.float() if half else input)
    if out is not None:
        return torch.mul(gate, other, out=out)
    return torch.mul(gate, other).to(torch.result_type(input, other))


def _partial_overlap(a, b):
    """torch's get_overlap_status(a, b) == PARTIAL, for dense tensors (it cannot tell
    for others, and lets them be)."""
    if a is b or not a.numel() or not b.numel() or a.device != b.device:
        return False
    if isinstance(a, FakeTensor) or isinstance(b, FakeTensor):
        return False
    if not (is_dense(a) and is_dense(b)):
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if (a0, a1) == (b0, b1):
        return a.stride() != b.stride()
    return a0 < b1 and b0 < a1


# ---- the registry -------------------------------------------------------------------

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
FLOAT_UNARY = ("abs", "neg", "exp", "rsqrt", "sin", "cos", "sigmoid", "tanh")
ORDERED = FLOATS + INTEGERS + BOOL
BITS = INTEGERS + BOOL

# The hand-written specs: every composite op's (a unit test fails for one without; a
# new one keeps its spec in its tests/ops module, `fuzz_spec()`, below), and the
# ordinary ops' whose calls a declaration cannot draw (scalars, forms).
HAND = {
    **{op: Spec(_unary, getattr(torch, op), FLOATS) for op in FLOAT_UNARY},
    "bitwise_not": Spec(_unary, torch.bitwise_not, BITS),
    "isnan": Spec(_predicate, torch.isnan, FLOATS),
    "isinf": Spec(_predicate, torch.isinf, FLOATS),
    "relu": Spec(_activation, F.relu, FLOATS),
    "silu": Spec(_activation, F.silu, FLOATS),
    "gelu": Spec(_gelu, F.gelu, FLOATS),
    **{op: Spec(_binary, getattr(torch, op), FLOATS) for op in ("add", "sub", "mul", "div")},
    "pow": Spec(_binary, torch.pow, FLOATS),
    "silu_mul": Spec(_binary, silu_mul, FLOATS),
    **{op: Spec(_binary, getattr(torch, op), ORDERED) for op in COMPARISONS},
    "bitwise_and": Spec(_binary, torch.bitwise_and, BITS),
    "bitwise_or": Spec(_binary, torch.bitwise_or, BITS),
    "clamp": Spec(_clamp, torch.clamp, FLOATS),
    "dropout": Spec(_dropout, F.dropout, FLOATS, check="dropout"),
    "softmax": Spec(_softmax, torch.softmax, (*FLOATS, torch.float64)),
    "log_softmax": Spec(_softmax, torch.log_softmax, (*FLOATS, torch.float64)),
    "embedding": Spec(_embedding, F.embedding, FLOATS),
    "rms_norm": Spec(_norm, F.rms_norm, FLOATS),
    "layer_norm": Spec(_norm, F.layer_norm, FLOATS, atol=_layer_norm_atol),
    "mm": Spec(_mm, torch.mm, FLOATS, atol=_product_atol),
    "bmm": Spec(_mm, torch.bmm, FLOATS, atol=_product_atol),
    "addmm": Spec(_addmm, torch.addmm, FLOATS, atol=_product_atol),
    "matmul": Spec(_matmul, matmul, FLOATS, kernel="mm", atol=_product_atol, names=("mm", "bmm")),
    "scaled_dot_product_attention": Spec(
        _attention, attention.reference, FLOATS, atol=_attention_atol
    ),
    "rotary_position_embedding": Spec(_rope, rotary_position_embedding, FLOATS, atol=_rope_atol),
}


def _beside_their_ops():
    """The specs composite ops keep in their tests/ops module (`fuzz_spec()`, or
    `fuzz_specs()` by function where one kernel serves several: max's and argmax's;
    either may import this module: it runs once this module has defined all but what
    follows)."""
    from tests.ops import makers

    found = {}
    for op, module in makers().items():
        if hasattr(module, "fuzz_specs"):
            found.update(module.fuzz_specs())
        elif hasattr(module, "fuzz_spec") and op not in HAND:
            found[op] = module.fuzz_spec()
    return {name: spec for name, spec in found.items() if name not in HAND}


HAND.update(_beside_their_ops())


def _declared(api, dtypes):
    """The spec of an ordinary op with no spec above, from its declaration (the wheel's
    _ops.APIS): tensors drawn in every layout, a Tensor|Number operand as binary ops
    draw theirs, other parameters from its samples and defaults, out= and in place
    where it has them."""
    writes = api["writes"]
    names = [param["name"] for param in api["params"] if param["name"] != writes]
    reference = _by_name(resolve(api["reference"]), names)

    def draw(d, op):
        dtype = d.principal(dtypes)
        shape = d.shape()
        args, kwargs, tensors, result = [], {}, [], shape
        for param in api["params"]:
            name = param["name"]
            if name == writes:
                continue
            if param["type"] == "Tensor":
                value = d.tensor(shape, dtype)
                tensors.append(value)
            elif param["type"] == "Tensor|Number":
                value, result = _other(d, op, tensors[0], shape, dtype)
                tensors.append(value)
            else:
                choices = [s["values"][name] for s in api["samples"] if name in s["values"]]
                if not choices or (not param["required"] and d.chance(0.4)):
                    continue  # its default
                value = d.pick(choices)
            if param["keyword"]:
                kwargs[name] = value
            else:
                args.append(value)
        if writes == "out":
            dtype = _result_dtype(d, reference, args, kwargs)
            kwargs.update({} if dtype is None else _out(d, tensors, result, dtype))
        elif writes == "inplace" and d.chance(0.3):
            d.note("inplace=True")
            kwargs["inplace"] = True
            view = d.view(tensors[0])
            sizes = zip(view.shape, view.stride(), strict=True)
            if any(step == 0 and size > 1 for size, step in sizes):
                # torch lets idempotent ops (threshold_) write an expanded view; the
                # launcher's outputs own their elements
                d.out_of_space("an expanded view written in place")
        return tuple(args), kwargs

    return Spec(draw, reference, dtypes)


def _by_name(function, names):
    """`function` (a reference, parameters `names`) given its first argument by position
    and the others by name, as every torch function takes them: a declaration may take
    more by position than torch does (round's decimals, as upstream ntops takes it)."""

    def call(first, *args, **kwargs):
        return function(first, **dict(zip(names[1:], args, strict=False)), **kwargs)

    return call


def _result_dtype(d, reference, args, kwargs):
    """The dtype of the reference's result for drawn `args` and `kwargs`, found on meta
    tensors of the operands' shapes and dtypes (the operands are placeholders until the
    case is made); None where the reference refuses them (no out= is drawn then)."""

    def meta(value):
        if not isinstance(value, Operand):
            return value
        shape, dtype = d.shapes[value]
        return torch.empty(shape, dtype=dtype, device="meta")

    try:
        return reference(*map(meta, args), **{k: meta(v) for k, v in kwargs.items()}).dtype
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None


def declared_specs(apis: Iterable[Mapping], dtypes: Mapping[str, Iterable[str]]) -> dict:
    """The spec of every function of `apis` (the declarations, as `_ops.APIS` has them)
    that has one: its hand spec with its declared tolerance, else, for an ordinary op,
    one drawn from its declaration (`_declared`) in `dtypes[op]` (manifest names)."""
    found = {}
    for api in apis:
        name = api["name"]
        if name in HAND:
            found[name] = dataclasses.replace(HAND[name], tolerance=api["tolerance"])
        elif api["wrapper"] is None:
            built = tuple(BY_NAME[short] for short in dtypes[api["op"]])
            found[name] = dataclasses.replace(_declared(api, built), tolerance=api["tolerance"])
    return found


def _from_the_wheel():
    """The installed wheel's specs (`declared_specs` of its declarations)."""
    try:
        import ntops_prebuilt
        from ntops_prebuilt import _ops
    except ImportError:
        return {}
    built = ntops_prebuilt.manifest()["ops"]
    return declared_specs(_ops.APIS, {op: info["dtypes"] for op, info in built.items()})


SPECS = {**HAND, **_from_the_wheel()}
REFERENCE = types.SimpleNamespace(**{op: spec.reference for op, spec in SPECS.items()})


def op_of(index, ops):
    """The op of case `index`: they take turns, so any len(ops) cases in a row test all."""
    return sorted(ops)[index % len(ops)]


def make_case(seed, index, ops=None):
    """Case `index` of `seed` over `ops` (default: all): its op's turn, called as drawn
    from ("seed-index") alone."""
    op = op_of(index, ops or SPECS)
    draw = Draw(seed, index)
    args, kwargs = SPECS[op].draw(draw, op)
    return draw.case(seed, index, op, args, kwargs)
