"""Every kernel in the installed wheel, run through the public function on inputs laid
out for its spec, checked against torch and checked to be the kernel that ran."""

import math

import pytest
import torch

from tests.gpu.layouts import BY_NAME as DTYPES
from tests.gpu.layouts import Spec, assert_kernel, strided, values
from tests.tolerances import tolerance

F = torch.nn.functional
SHAPES = {"aligned": (3, 5, 2, 48), "odd": (3, 5, 2, 37)}
# Composite ops (hand-written runtime wrappers) are laid out by the recipes below; an
# ordinary op by its declaration (_ops.APIS): its kernel's parameters, switches and
# sample values.
ALLOCATING = {"clamp", "dropout"}
BINARY = {"silu_mul"}


def _ordinary():
    try:
        from ntops_prebuilt import _ops
    except ImportError:
        return {}
    return {api["op"]: api for api in _ops.APIS if api["wrapper"] is None}


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
        return 1 + sum(_is_tensor(ORDINARY[op], name, switches) for name in ORDINARY[op]["kernel"])
    if op == "clamp":  # input, its tensor bounds, output
        return 2 + list(switches.values()).count("tensor")
    if op in ALLOCATING or op in ("softmax", "log_softmax"):
        return 2
    if op in BINARY:
        return 3
    if op == "rms_norm":
        return 3 if switches["weight"] == "given" else 2
    if op == "layer_norm":
        return 2 + list(switches.values()).count("given")
    if op == "addmm":
        return 4
    if op == "scaled_dot_product_attention":
        return 7 if switches["mask"] in ("bool", "float") else 6
    return 4 if op == "rotary_position_embedding" else 3


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
    shape = SHAPES["aligned" if spec.aligned else "odd"][4 - variant["ndim"] :]
    domain = next((s["domain"] for s in api["samples"] if s["domain"]), None)
    wide = spec.width == 64
    units = iter(spec.unit)
    arguments = {}
    for name in api["kernel"]:
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
    first = api["kernel"][0]
    named = {name: value for name, value in arguments.items() if name != first}
    reference = _reference(api["reference"])
    expected = reference(arguments[first], **named)
    function = getattr(nt, api["name"])
    if api["writes"] != "out":
        return function(arguments[first], **named), expected
    out = strided(shape, expected.dtype, unit=next(units), aligned=spec.aligned, wide=wide)
    return function(arguments[first], **named, out=out), expected


def _reference(dotted):
    import importlib

    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _element_wise(nt, variant, spec, dtype):
    op, switches = variant["op"], variant["switches"]
    if op in ORDINARY:
        return _declared(nt, ORDINARY[op], variant, spec, dtype)
    shape = SHAPES["aligned" if spec.aligned else "odd"][4 - variant["ndim"] :]

    def layout(unit):
        return strided(shape, dtype, unit=unit, aligned=spec.aligned, wide=spec.width == 64)

    x = layout(spec.unit[0])
    if op in ALLOCATING:
        if op == "clamp":
            units = iter(spec.unit[1:])
            low, high = (
                layout(next(units)).add_(offset) if switches[name] == "tensor" else offset
                for name, offset in (("min", -0.5), ("max", 0.7))
            )
            if isinstance(low, torch.Tensor) != isinstance(high, torch.Tensor):
                # a number beside a tensor bound: as None (an infinity) is passed
                low, high = (b if isinstance(b, torch.Tensor) else None for b in (low, high))
            return nt.clamp(x, low, high), torch.clamp(x, low, high)
        if op == "dropout":
            kept = nt.dropout(x, 0.25)
            expected = torch.where(kept == 0, kept, x / 0.75)
            return kept, expected
    other = layout(spec.unit[1])  # silu_mul: the reference in fp32, rounded once as the kernel
    result = nt.silu_mul(x, other, out=layout(spec.unit[2]))
    return result, (F.silu(x.float()) * other.float()).to(dtype)


def _rows(nt, variant, spec, dtype):
    op, switches = variant["op"], variant["switches"]
    shape = SHAPES["aligned" if spec.aligned else "odd"][4 - variant["ndim"] :]
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    if op in ("softmax", "log_softmax"):
        return getattr(nt, op)(x, -1), getattr(torch, op)(x, -1)
    n = x.shape[-1]
    vectors = [
        strided((n,), dtype, unit=spec.unit[1 + i], aligned=spec.aligned)
        for i in range(_num_tensors(variant) - 2)
    ]
    if op == "rms_norm":
        weight = vectors[0] if vectors else None
        expected = F.rms_norm(x.float(), (n,), None if weight is None else weight.float(), 1e-6)
        return nt.rms_norm(x, (n,), weight, 1e-6), expected.to(dtype)
    given = iter(vectors)
    weight = next(given) if switches["weight"] == "given" else None
    bias = next(given) if switches["bias"] == "given" else None
    as_float = [None if v is None else v.float() for v in (weight, bias)]
    expected = F.layer_norm(x.float(), (n,), *as_float, 1e-5).to(dtype)
    return nt.layer_norm(x, (n,), weight, bias), expected


def _embedding(nt, variant, spec, dtype):
    """Rows of a weight laid out for the spec (wide: its two rows 2^31 elements apart)
    gathered at indices of the switch's dtype, every row at least once."""
    index = DTYPES[variant["switches"]["index"]]
    width = 48 if spec.aligned else 37
    wide = spec.width == 64
    weight = strided((50, width), dtype, unit=spec.unit[1], aligned=spec.aligned, wide=wide)
    rows = weight.shape[0]
    indices = torch.cat((torch.arange(rows), torch.randint(0, rows, (23,)))).to("cuda", index)
    return nt.embedding(indices, weight), F.embedding(indices, weight)


def _size_in(served, size):
    """A size in the range a kernel serves (the launcher picks by rows and columns):
    `size` itself, else the range's low end plus as much over a multiple of 16."""
    low, high = served
    return size if low <= size <= high else min(high, -(-low // 16) * 16 + size % 16)


def _matmul(nt, variant, spec, dtype, bucket):
    op = variant["op"]
    k = 32 if spec.aligned else 23
    m = _size_in(bucket[0], 7)
    n = _size_in(bucket[1], 48 if spec.aligned else 29)
    wide = spec.width == 64
    # A wide layout puts its two outermost entries 2^31 elements apart: two rows of a
    # matrix, two matrices of a batch.
    batch = (2 if wide else 3,) if op == "bmm" else ()
    m = 2 if wide and not batch else m
    units = spec.unit[1:] if op == "addmm" else spec.unit
    a = strided((*batch, m, k), dtype, unit=units[0], aligned=spec.aligned, wide=wide)
    b = strided((*batch, k, n), dtype, unit=units[1], aligned=spec.aligned)
    out = strided((*batch, m, n), dtype, unit=units[2], aligned=spec.aligned)
    previous = torch.get_float32_matmul_precision()
    ieee = variant["switches"]["fp32_precision"] == "ieee"
    torch.set_float32_matmul_precision("highest" if ieee else "high")
    try:
        if op == "addmm":
            bias = values((n,), dtype)
            result = nt.addmm(bias, a, b, beta=0.5, alpha=2.0, out=out)
            reference = 0.5 * bias.double() + 2.0 * (a.double() @ b.double())
        else:
            result = getattr(nt, op)(a, b, out=out)
            reference = a.double() @ b.double()
    finally:
        torch.set_float32_matmul_precision(previous)
    return result, reference


def _attention(nt, variant, spec, dtype, bucket):
    """Queries of the kernel's bucket (decode: 3 of them, against keys split into
    parts) in the spec's layout; key lengths no block divides. The last keys and values
    arrive as new KV-cache entries, which the kernel writes into the caches."""
    switches = variant["switches"]
    head_dim, mask = int(switches["head_dim"]), switches["mask"]
    batch, heads_q, heads_kv = 2, 4, 2
    seq_q = _size_in(bucket[0], 3 if bucket[0][1] <= 16 else 37)
    seq_kv = _size_in(bucket[1], 1000 if bucket[0][1] <= 16 else 53)
    wide = spec.width == 64
    unit = None if spec.unit[0] is None else 3

    def layout(heads, seq, wide=False):
        return strided(
            (batch, heads, seq, head_dim), dtype, unit=unit, aligned=spec.aligned, wide=wide
        )

    # wide: the query's two batches lie 2^31 elements apart
    q, k, v = layout(heads_q, seq_q, wide), layout(heads_kv, seq_kv), layout(heads_kv, seq_kv)
    appended = 3  # a few new entries: the kernel writes them (more are copied first)
    new_k, new_v = layout(heads_kv, appended), layout(heads_kv, appended)
    attn_mask = None
    if mask == "bool":
        attn_mask = torch.rand(q.shape[0], 1, seq_q, seq_kv, device="cuda") > 0.3
        attn_mask[..., 0] = True
    elif mask == "float":
        attn_mask = values((1, heads_q, 1, seq_kv), dtype)
    causal = mask == "causal"
    result = nt.scaled_dot_product_attention(
        q, k, v, attn_mask, is_causal=causal, enable_gqa=True,
        present_key=new_k, present_value=new_v,
        present_key_slot=k[:, :, -appended:], present_value_slot=v[:, :, -appended:],
    )  # fmt: skip
    assert torch.equal(k[:, :, -appended:], new_k)
    assert torch.equal(v[:, :, -appended:], new_v)
    kr, vr = (t.float().repeat_interleave(heads_q // heads_kv, 1) for t in (k, v))
    float_mask = (
        attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.float()
    )
    reference = F.scaled_dot_product_attention(q.float(), kr, vr, float_mask, is_causal=causal)
    return result, reference.to(dtype)


def _rope(nt, variant, spec, dtype):
    interleaved = spec.unit[0] is not None
    # The 3-dim kernel serves decode shapes: one token of one sequence, (heads, pairs, 2).
    batch, seq, heads, head_dim = (1, 1, 3, 64) if variant["ndim"] == 3 else (2, 7, 3, 64)
    x = strided((batch, seq, heads, head_dim), dtype, unit=3, aligned=False, wide=spec.width == 64)
    angles = torch.rand(seq, head_dim // 2, device="cuda") * 6
    sin, cos = angles.sin().to(dtype), angles.cos().to(dtype)
    half = head_dim // 2
    x0, x1 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :half], x[..., half:])
    s, c = sin[None, :, None, :].float(), cos[None, :, None, :].float()
    o0, o1 = x0.float() * c - x1.float() * s, x0.float() * s + x1.float() * c
    expected = torch.stack((o0, o1), -1).flatten(-2) if interleaved else torch.cat((o0, o1), -1)
    return nt.rotary_position_embedding(x, sin, cos, interleaved=interleaved), expected.to(dtype)


def test_kernel(nt, variant, kernel):
    dtype = DTYPES[variant["dtype"]]
    spec = kernel["spec"]
    parsed = Spec.parse(spec, _num_tensors(variant))
    op = variant["op"]
    if op in ("mm", "bmm", "addmm"):
        result, reference = _matmul(nt, variant, parsed, dtype, kernel["bucket"])
        assert_kernel(nt, kernel["id"])
        error = (result.double() - reference).norm() / reference.norm()
        ieee = dtype == torch.float32 and variant["switches"]["fp32_precision"] == "ieee"
        limit = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-5 if ieee else 2e-3)
        assert error < limit
        return
    if op == "embedding":
        result, reference = _embedding(nt, variant, parsed, dtype)
    elif op in ("softmax", "log_softmax", "rms_norm", "layer_norm"):
        result, reference = _rows(nt, variant, parsed, dtype)
    elif op == "scaled_dot_product_attention":
        result, reference = _attention(nt, variant, parsed, dtype, kernel["bucket"])
    elif op == "rotary_position_embedding":
        result, reference = _rope(nt, variant, parsed, dtype)
    else:
        result, reference = _element_wise(nt, variant, parsed, dtype)
    assert_kernel(nt, kernel["id"])
    if reference.dtype.is_floating_point:
        within = tolerance(dtype, _declared_tolerance(op), result=reference.dtype)
        torch.testing.assert_close(result, reference, equal_nan=True, **within)
    else:
        assert torch.equal(result, reference)
    if parsed.width == 64:
        torch.cuda.empty_cache()


def test_dropout_keeps_about_one_minus_p(nt):
    x = torch.ones(1 << 20, device="cuda")
    for p in (0.1, 0.5, 0.9):
        kept = (nt.dropout(x, p) != 0).float().mean().item()
        assert abs(kept - (1 - p)) < 0.01
        assert math.isclose(nt.dropout(x, p).max().item(), 1 / (1 - p), rel_tol=1e-6)
