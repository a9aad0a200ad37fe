"""torch semantics of the whole ntops.torch API: every dtype, odd shapes, views,
broadcasting, Python scalars, every switch, and the errors bad input must get."""

import math

import pytest
import torch

from tests.gpu.layouts import values
from tests.tolerances import of, tolerance

F = torch.nn.functional
FLOATS = [torch.float16, torch.bfloat16, torch.float32]
INTEGERS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
ODD = (6, 42, 123)


def views(x):
    """The tensor itself, dense in another order, strided and unaligned, and permuted."""
    return [x, x.transpose(0, 2), x[:, ::2, 1:], x.permute(1, 2, 0)]


def close(got, want, dtype=None):
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(dtype or want.dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "name", ["abs", "neg", "exp", "rsqrt", "sin", "cos", "sigmoid", "tanh", "relu", "silu"]
)
def test_unary_float_functions(nt, name, dtype):
    x = values(ODD, dtype, "positive" if name == "rsqrt" else None)
    reference = {"relu": torch.relu, "silu": F.silu}.get(name, getattr(torch, name, None))
    for view in views(x):
        close(getattr(nt, name)(view), reference(view))
    if name in ("relu", "silu"):
        y = x.clone()
        assert getattr(nt, name)(y, inplace=True) is y
        close(y, reference(x))
    else:
        out = torch.empty_like(x)
        assert getattr(nt, name)(x, out=out) is out
        close(out, reference(x))


@pytest.mark.parametrize("dtype", FLOATS)
def test_silu_mul(nt, dtype):
    """SwiGLU's gate as models call it, on the halves of one projection's rows (strided
    views), and broadcast, with out=."""
    h = values((5, 2 * 333), dtype)
    gate, up = h[:, :333], h[:, 333:]

    def reference(a, b):
        return (F.silu(a.float()) * b.float()).to(dtype)

    close(nt.silu_mul(gate, up), reference(gate, up))
    row = values((333,), dtype)
    close(nt.silu_mul(gate, row), reference(gate, row))
    out = torch.empty(5, 333, dtype=dtype, device="cuda")
    assert nt.silu_mul(gate, up, out=out) is out
    close(out, reference(gate, up))
    with pytest.raises(ValueError, match="broadcast"):
        nt.silu_mul(gate, values((5, 334), dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_isnan_isinf_and_nan_propagation(nt, dtype):
    x = values(ODD, dtype)
    x[0, 0, :3] = float("nan")
    x[1, 1, :3] = float("inf")
    x[2, 2, :3] = -float("inf")
    for view in views(x):
        assert torch.equal(nt.isnan(view), torch.isnan(view))
        assert torch.equal(nt.isinf(view), torch.isinf(view))
        assert nt.isnan(view).dtype == torch.bool
    assert nt.relu(x)[0, 0, :3].isnan().all()
    assert nt.clamp(x, -1, 1)[0, 0, :3].isnan().all()


@pytest.mark.parametrize("dtype", FLOATS)
def test_arithmetic_with_tensors_scalars_and_broadcasting(nt, dtype):
    x, y = values(ODD, dtype), values(ODD, dtype)
    row = values((123,), dtype)
    for other in (y, row, values((42, 1), dtype), 2, 0.5, True, torch.tensor(1.25)):
        close(nt.add(x, other, alpha=0.5), torch.add(x, other, alpha=0.5))
        if other is not True:
            close(nt.sub(x, other, alpha=2), torch.sub(x, other, alpha=2))
        close(nt.mul(x, other), torch.mul(x, other))
        close(nt.div(x, other), torch.div(x, other))
    for view in views(x):
        close(nt.add(view, view.clone()), view + view)
    for other in (True, y > 0):
        with pytest.raises(RuntimeError, match="bool"):
            nt.sub(x, other)
    out = torch.empty_like(x)
    assert nt.sub(x, y, out=out) is out
    close(out, x - y)
    close(nt.pow(x.abs() + 0.1, y), torch.pow(x.abs() + 0.1, y))
    close(nt.pow(x, 2), torch.pow(x, 2))
    close(nt.pow(x.abs(), 0.5), torch.pow(x.abs(), 0.5))


@pytest.mark.parametrize("dtype", FLOATS)
def test_division_rounding_modes(nt, dtype):
    x, y = values(ODD, dtype) * 10, values(ODD, dtype)
    for mode in (None, "trunc", "floor"):
        close(nt.div(x, y, rounding_mode=mode), torch.div(x, y, rounding_mode=mode))
        close(nt.div(x, 0.3, rounding_mode=mode), torch.div(x, 0.3, rounding_mode=mode))
    ones = torch.tensor([1.0, -1.0, 7.0, 0.0, -0.0], device="cuda", dtype=dtype)
    assert torch.equal(
        nt.div(ones, 0.1, rounding_mode="floor"), torch.div(ones, 0.1, rounding_mode="floor")
    )
    zero = torch.zeros_like(ones)
    close(nt.div(ones, zero), torch.div(ones, zero))
    with pytest.raises(ValueError, match="rounding_mode"):
        nt.div(x, y, rounding_mode="round")


@pytest.mark.parametrize("dtype", FLOATS)
def test_clamp(nt, dtype):
    x = values(ODD, dtype)
    close(nt.clamp(x, -0.5, 0.5), torch.clamp(x, -0.5, 0.5))
    close(nt.clamp(x, min=0), torch.clamp(x, min=0))
    close(nt.clamp(x[:, ::3], max=0.25), torch.clamp(x[:, ::3], max=0.25))
    close(nt.clamp(x, 1.0, -1.0), torch.clamp(x, 1.0, -1.0))  # min > max: all max
    with pytest.raises(ValueError, match="at least one"):
        nt.clamp(x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_clamp_with_tensor_bounds(nt, dtype):
    """Tensor bounds broadcast with input either way, beside a tensor or None; NaN in
    any operand's element makes that element NaN; min > max gives max; out= works."""
    x = values(ODD, dtype)
    low, high = values(ODD, dtype) - 0.5, values(ODD, dtype) + 0.5
    x[0, 0, :3] = low[1, 1, :3] = high[2, 2, :3] = float("nan")
    high[3] = low[3] - 1  # min > max: max
    row = values((1, 1, 123), dtype)
    for view in views(x):
        bounds = [b for b in views(low) + views(high) if b.shape == view.shape]
        close(nt.clamp(view, *bounds[:2]), torch.clamp(view, *bounds[:2]))
        close(nt.clamp(view, bounds[0]), torch.clamp(view, bounds[0]))
        close(nt.clamp(view, max=bounds[1]), torch.clamp(view, max=bounds[1]))
    close(nt.clamp(x, row, high), torch.clamp(x, row, high))
    close(nt.clamp(x[:1, :1], low), torch.clamp(x[:1, :1], low))  # larger than input
    nan = torch.tensor(math.nan, device="cuda", dtype=dtype)
    close(nt.clamp(x, low, nan), torch.clamp(x, low, nan))  # all NaN
    close(nt.clamp(x, min=row[0, 0, 5]), torch.clamp(x, min=row[0, 0, 5]))  # 0-dim on device
    with pytest.raises(TypeError, match="expected CUDA tensors"):  # torch: RuntimeError
        nt.clamp(x, low, torch.tensor(0.25))  # tensor bounds allow no CPU scalars in torch
    out = torch.empty_like(x)
    assert nt.clamp(x, low, high, out=out) is out
    close(out, torch.clamp(x, low, high))
    assert nt.clamp(x, -0.5, 0.5, out=out) is out
    close(out, torch.clamp(x, -0.5, 0.5))
    y = x.clone()
    close(nt.clamp(y, low, high, out=y), torch.clamp(x, low, high))  # out= the input
    with pytest.raises(TypeError, match="one dtype"):
        nt.clamp(x, low.double())
    with pytest.raises(ValueError, match="does not broadcast"):
        nt.clamp(x, low[:, :5])
    with pytest.raises(TypeError, match="both be numbers"):
        nt.clamp(x, low, 0.5)
    close(nt.clamp(x, nan, 0.5), torch.clamp(x, nan, 0.5))  # a 0-dim tensor as a number
    close(nt.clamp(x, -0.5, row[0, 0, 7]), torch.clamp(x, -0.5, row[0, 0, 7]))
    for lone in (math.nan, nan):  # a number ignored, a tensor not
        close(nt.clamp(x, lone), torch.clamp(x, lone))
        close(nt.clamp(x, max=lone), torch.clamp(x, max=lone))


@pytest.mark.parametrize("dtype", [*FLOATS, torch.float64])
def test_softmax_to_float64(nt, dtype):
    """dtype=torch.float64 converts first and computes in double, as torch does: as
    close to an exact softmax as torch's (rows up to 1e4 wide, logits up to 700)."""
    x = (values(ODD, torch.float32) * 200).to(dtype)
    for dim in (-1, 0, 1):
        got = nt.softmax(x, dim, dtype=torch.float64)
        want = torch.softmax(x, dim, dtype=torch.float64)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-300)
    wide = values((4, 10000), torch.float64) * 700
    exact = torch.softmax(wide.cpu(), -1)  # the CPU's exp and sum: an independent reference
    ours, theirs = nt.softmax(wide, -1, dtype=torch.float64), torch.softmax(wide, -1)
    ours_error = ((ours.cpu() - exact).abs() / exact.clamp_min(1e-300)).max()
    theirs_error = ((theirs.cpu() - exact).abs() / exact.clamp_min(1e-300)).max()
    assert ours_error <= max(4 * theirs_error, 1e-14), (ours_error, theirs_error)


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS + [torch.bool])
@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(nt, name, dtype):
    x, y = values(ODD, dtype), values(ODD, dtype)
    y[::2] = x[::2]  # some equal pairs
    function, reference = getattr(nt, name), getattr(torch, name)
    scalars = (
        [True, False]
        if dtype == torch.bool
        else [0, 3, 300, -1]
        if not dtype.is_floating_point
        else [0, 0.1, 2, True]
    )
    for other in (y, y[0], *scalars):
        result = function(x, other)
        assert result.dtype == torch.bool
        assert torch.equal(result, reference(x, other)), other
    for view in views(x):
        assert torch.equal(function(view, view.clone()), reference(view, view))
    out = torch.empty(ODD, dtype=torch.bool, device="cuda")
    assert function(x, y, out=out) is out
    # An out= of another dtype gets the bools cast, as torch casts them.
    other_out = torch.empty_like(x) if dtype != torch.bool else torch.empty(ODD, device="cuda")
    assert function(x, y, out=other_out) is other_out
    assert torch.equal(other_out, reference(x, y).to(other_out.dtype))


def test_promotion_is_refused_clearly(nt):
    h, f = values(ODD, torch.float16), values(ODD, torch.float32)
    i, b = values(ODD, torch.int32), values(ODD, torch.bool)
    cases = [
        (TypeError, "one dtype", lambda: nt.add(h, f)),
        (TypeError, "one dtype", lambda: nt.eq(h, f)),
        (TypeError, "promote to float", lambda: nt.eq(i, 2.5)),
        (TypeError, "promote to int", lambda: nt.eq(b, 2)),
        (TypeError, "promote to int", lambda: nt.bitwise_and(b, 1)),
        (TypeError, "must be a tensor or a Python number", lambda: nt.mul(h, "2")),
        (nt.NotBuiltError, "add takes fp16, bf16, fp32 only", lambda: nt.add(i, i)),
    ]
    for error, words, call in cases:
        with pytest.raises(error, match=words):
            call()


@pytest.mark.parametrize("dtype", [*INTEGERS, torch.bool])
def test_bitwise(nt, dtype):
    x, y = values(ODD, dtype), values(ODD, dtype)
    scalars = [True, False] if dtype == torch.bool else [0, 7, -1, 300]
    for other in (y, y[0], *scalars):
        assert torch.equal(nt.bitwise_and(x, other), torch.bitwise_and(x, other))
        assert torch.equal(nt.bitwise_or(x, other), torch.bitwise_or(x, other))
    for view in views(x):
        assert torch.equal(nt.bitwise_not(view), torch.bitwise_not(view))
    out = torch.empty_like(x)
    assert nt.bitwise_not(x, out=out) is out
    assert torch.equal(out, ~x)


def test_dropout(nt):
    x = torch.randn(1 << 20, device="cuda")
    assert nt.dropout(x, 0.5, training=False) is x
    assert nt.dropout(x, 0.0) is x
    assert torch.equal(nt.dropout(x, 1.0), torch.zeros_like(x))
    torch.manual_seed(7)
    first, second = nt.dropout(x, 0.3), nt.dropout(x, 0.3)
    assert not torch.equal(first, second)  # a fresh mask per call
    torch.manual_seed(7)
    assert torch.equal(nt.dropout(x, 0.3), first)  # the same stream under the same seed
    kept = first != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01
    close(first[kept], x[kept] / 0.7)
    y = x.clone()
    assert nt.dropout(y, 0.5, inplace=True) is y
    assert ((y == 0) | torch.isclose(y, x * 2)).all()
    for dtype in (torch.float16, torch.bfloat16):
        half = x.to(dtype)[:1000].reshape(10, 100)[:, ::3]
        out = nt.dropout(half, 0.5)
        assert ((out == 0) | torch.isclose(out, half * 2)).all()
    with pytest.raises(ValueError, match="between 0 and 1"):
        nt.dropout(x, 1.5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(nt, dtype):
    x = values(ODD, dtype)
    weight, bias = values((123,), dtype), values((123,), dtype)

    def reference(input, shape, w=None, b=None, eps=1e-5):
        w, b = (None if t is None else t.float() for t in (w, b))
        return F.layer_norm(input.float(), shape, w, b, eps).to(dtype)

    for w, b in ((weight, bias), (weight, None), (None, bias), (None, None)):
        close(nt.layer_norm(x, (123,), w, b), reference(x, (123,), w, b), dtype)
    close(
        nt.layer_norm(x.transpose(0, 1), (123,), weight, bias, 1e-3),
        reference(x.transpose(0, 1), (123,), weight, bias, 1e-3),
        dtype,
    )
    w2, b2 = values((42, 123), dtype), values((42, 123), dtype)
    close(nt.layer_norm(x, (42, 123), w2, b2), reference(x, (42, 123), w2, b2), dtype)
    long = values((3, 5000), dtype) * 10 + 100  # a large mean: the variance is two-pass
    close(nt.layer_norm(long, (5000,)), reference(long, (5000,)), dtype)
    with pytest.raises(ValueError, match="normalized_shape"):
        nt.layer_norm(x, (42,))


@pytest.mark.parametrize("dtype", FLOATS)
def test_matrix_products(nt, dtype):
    def check(result, expected):
        error = (result.double() - expected).norm() / expected.norm()
        assert error < (1e-2 if dtype == torch.bfloat16 else 3e-3)

    a, b = values((123, 77), dtype), values((77, 45), dtype)
    batch_a, batch_b = values((5, 123, 77), dtype), values((5, 77, 45), dtype)
    check(nt.bmm(batch_a, batch_b), batch_a.double() @ batch_b.double())
    check(
        nt.bmm(batch_a.transpose(1, 2).contiguous().transpose(1, 2), batch_b),
        batch_a.double() @ batch_b.double(),
    )
    bias = values((45,), dtype)
    check(nt.addmm(bias, a, b), bias.double() + a.double() @ b.double())
    check(
        nt.addmm(bias[None, :].expand(123, 45).contiguous(), a, b, beta=0.5, alpha=2),
        0.5 * bias.double() + 2 * (a.double() @ b.double()),
    )
    poisoned = torch.full((123, 45), float("nan"), device="cuda", dtype=dtype)
    assert not nt.addmm(poisoned, a, b, beta=0).isnan().any()  # beta 0 ignores input, as in torch
    vector, other_vector = values((77,), dtype), values((77,), dtype)
    four = values((2, 3, 123, 77), dtype)
    for left, right in [
        (a, b),
        (vector, b),
        (a, vector),
        (vector, other_vector),
        (four, b),
        (four, vector),
        (batch_a, batch_b),
        (values((2, 1, 123, 77), dtype), values((3, 77, 45), dtype)),
        (vector, batch_b),
    ]:
        result = nt.matmul(left, right)
        expected = torch.matmul(left.double(), right.double())
        assert result.shape == expected.shape
        check(result, expected)
    out = torch.empty(123, 45, device="cuda", dtype=dtype)
    assert nt.matmul(a, b, out=out) is out
    with pytest.raises(ValueError, match="inner dims"):
        nt.bmm(batch_a, batch_a)
    with pytest.raises(ValueError, match="broadcast"):
        nt.addmm(values((7,), dtype), a, b)


def sdpa_reference(q, k, v, mask=None, causal=False, lower_right=False, scale=None):
    group = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(group, 1) for t in (k, v))
    scores = q.double() @ k.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        rows, columns = (
            torch.arange(q.shape[2], device="cuda"),
            torch.arange(k.shape[2], device="cuda"),
        )
        offset = k.shape[2] - q.shape[2] if lower_right else 0
        scores = scores.masked_fill(columns[None, :] > rows[:, None] + offset, float("-inf"))
    if mask is not None:
        scores = (
            scores.masked_fill(~mask, float("-inf"))
            if mask.dtype == torch.bool
            else scores + mask.double()
        )
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128, 256])
def test_attention(nt, dtype, head_dim):
    within = of("scaled_dot_product_attention", dtype)
    sdpa = nt.scaled_dot_product_attention

    def check(result, expected):
        torch.testing.assert_close(result, expected.to(dtype), **within)

    q = values((2, 8, 77, head_dim), dtype)
    k, v = values((2, 2, 130, head_dim), dtype), values((2, 2, 130, head_dim), dtype)
    check(sdpa(q, k, v, enable_gqa=True), sdpa_reference(q, k, v))
    check(sdpa(q, k, v, enable_gqa=True, scale=0.3), sdpa_reference(q, k, v, scale=0.3))
    check(sdpa(q, k, v, is_causal=True, enable_gqa=True), sdpa_reference(q, k, v, causal=True))
    lower = sdpa(
        q, k, v, is_causal=True, enable_gqa=True, causal_variant=nt.CausalVariant.LOWER_RIGHT
    )
    check(lower, sdpa_reference(q, k, v, causal=True, lower_right=True))
    same = values((2, 8, 130, head_dim), dtype)
    check(sdpa(same, same, same, is_causal=True), sdpa_reference(same, same, same, causal=True))
    keep = torch.rand(2, 1, 77, 130, device="cuda") > 0.4
    keep[..., 0] = True
    check(sdpa(q, k, v, keep, enable_gqa=True), sdpa_reference(q, k, v, keep.expand(2, 8, 77, 130)))
    bias = values((8, 1, 130), dtype)
    check(sdpa(q, k, v, bias, enable_gqa=True), sdpa_reference(q, k, v, bias.expand(2, 8, 77, 130)))
    check(
        sdpa(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, enable_gqa=True),
        sdpa_reference(q, k, v),
    )


def gqa_inputs(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, dtype):
    """q, k, v: the query a transposed view of a (batch, seq, heads, head_dim) projection,
    as models pass it."""
    q = values((batch, seq_q, heads_q, head_dim), dtype).transpose(1, 2)
    k, v = (values((batch, heads_kv, seq_kv, head_dim), dtype) for _ in "kv")
    return q, k, v


def check_lower_right(nt, q, k, v, dtype, within):
    """Causal from the bottom right (every row sees a key: seq_q <= seq_kv)."""
    lower = nt.CausalVariant.LOWER_RIGHT
    got = nt.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True, causal_variant=lower
    )
    expected = sdpa_reference(q, k, v, causal=True, lower_right=True)
    torch.testing.assert_close(got, expected.to(dtype), **within)


DECODE_CASES = [
    # batch, heads_q, heads_kv, seq_q, seq_kv, head_dim
    (1, 32, 8, 1, 1, 128),
    (1, 32, 8, 1, 4096, 128),
    (1, 32, 8, 1, 32768, 128),
    (1, 28, 4, 1, 32768, 128),  # Qwen2.5-7B's groups of 7: 32 parts on sm_90
    (8, 32, 8, 1, 1000, 128),
    (64, 32, 8, 1, 300, 128),
    (1, 32, 32, 1, 4097, 128),
    (2, 16, 4, 16, 2049, 128),
    (3, 8, 1, 5, 77, 128),
    (1, 64, 8, 16, 513, 128),
    (8, 32, 8, 1, 1000, 64),
    (1, 16, 4, 1, 4096, 32),
    (2, 12, 12, 16, 2049, 32),
    (1, 32, 8, 1, 4096, 96),
    (2, 16, 4, 16, 2049, 96),
    (1, 8, 8, 1, 1, 256),
    (4, 16, 8, 3, 3000, 256),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"), DECODE_CASES
)
def test_attention_decode(nt, dtype, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim):
    """Up to 16 queries against 1 to 32768 keys, batch 1 to 64, head dims 64 to 256 (the
    decode bucket: keys split across programs), the query a transposed view as models
    pass it; causal (the queries the last of the keys), bool and float masks."""
    within = of("scaled_dot_product_attention", dtype)
    q, k, v = gqa_inputs(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, dtype)
    sdpa = nt.scaled_dot_product_attention
    got = sdpa(q, k, v, enable_gqa=True)
    torch.testing.assert_close(got, sdpa_reference(q, k, v).to(dtype), **within)
    if seq_q <= seq_kv:
        check_lower_right(nt, q, k, v, dtype, within)
    keep = torch.rand(batch, 1, seq_q, seq_kv, device="cuda") > 0.5
    keep[..., -1] = True
    got = sdpa(q, k, v, keep, enable_gqa=True)
    expected = sdpa_reference(q, k, v, keep.expand(batch, heads_q, seq_q, seq_kv))
    torch.testing.assert_close(got, expected.to(dtype), **within)
    bias = values((heads_q, 1, seq_kv), dtype)
    got = sdpa(q, k, v, bias, enable_gqa=True)
    expected = sdpa_reference(q, k, v, bias.expand(batch, heads_q, seq_q, seq_kv))
    torch.testing.assert_close(got, expected.to(dtype), **within)


PREFILL_CASES = [
    # batch, heads_q, heads_kv, seq_q, seq_kv, head_dim: the prefill bucket (more than 16
    # queries; on sm_90 in half types the Gluon kernel for head dims 64 to 128)
    (1, 32, 8, 2048, 2048, 128),
    (2, 28, 4, 300, 1300, 128),  # a chunk over a cache: lower-right causal
    (3, 4, 2, 129, 129, 96),  # a block and one row; head_dim in 128's tiles
    (1, 16, 16, 17, 4000, 64),  # one query past decode's 16
    (2, 8, 8, 200, 100, 64),  # more queries than keys
    (1, 4, 1, 1000, 1000, 128),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"), PREFILL_CASES
)
def test_attention_prefill(nt, dtype, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim):
    """Prefill over odd lengths, GQA groups of 1 to 7, a chunk over a longer cache, the
    query a transposed view of a (batch, seq, heads, head_dim) projection: unmasked,
    causal upper-left and, where every row sees a key, lower-right."""
    within = of("scaled_dot_product_attention", dtype)
    q, k, v = gqa_inputs(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, dtype)
    sdpa = nt.scaled_dot_product_attention
    got = sdpa(q, k, v, enable_gqa=True)
    torch.testing.assert_close(got, sdpa_reference(q, k, v).to(dtype), **within)
    got = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    expected = sdpa_reference(q, k, v, causal=True)
    torch.testing.assert_close(got, expected.to(dtype), **within)
    if seq_q <= seq_kv:
        check_lower_right(nt, q, k, v, dtype, within)


def test_attention_fully_masked_rows_give_zero(nt):
    q = values((2, 8, 3, 128), torch.float16)
    k, v = values((2, 2, 700, 128), torch.float16), values((2, 2, 700, 128), torch.float16)
    keep = torch.rand(2, 8, 3, 700, device="cuda") > 0.5
    keep[:, :, 1] = False  # the second query of every head sees no key
    got = nt.scaled_dot_product_attention(q, k, v, keep, enable_gqa=True)
    assert torch.equal(got[:, :, 1], torch.zeros_like(got[:, :, 1]))
    expected = sdpa_reference(q[:, :, ::2], k, v, keep[:, :, ::2]).half()
    within = of("scaled_dot_product_attention", torch.float16)
    torch.testing.assert_close(got[:, :, ::2], expected, **within)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("seq_q", [1, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_kv_cache(nt, batch, seq_q, causal):
    """A model's step: queries and new keys and values are views of one fused projection
    ((batch, seq, heads, head_dim) transposed), the caches have room past the step, and
    the slots are the attended caches' last positions, so the kernel writes them (no
    copies). A slot elsewhere is copied first; a bad call leaves the caches alone."""
    dtype, head_dim, heads_q, heads_kv, position = torch.bfloat16, 128, 8, 2, 300
    sizes = (heads_q * head_dim, heads_kv * head_dim, heads_kv * head_dim)
    qkv = values((batch, seq_q, sum(sizes)), dtype)
    q, new_k, new_v = (
        part.unflatten(-1, (-1, head_dim)).transpose(1, 2) for part in qkv.split(sizes, -1)
    )
    cache_k, cache_v = (values((batch, heads_kv, 512, head_dim), dtype) for _ in range(2))
    end = position + seq_q
    visible_k, visible_v = cache_k[:, :, :end], cache_v[:, :, :end]
    sdpa = nt.scaled_dot_product_attention

    def step(key_slot, value_slot, **options):
        return sdpa(
            q, visible_k, visible_v, is_causal=causal, enable_gqa=True,
            causal_variant=nt.CausalVariant.LOWER_RIGHT, present_key=new_k,
            present_value=new_v, present_key_slot=key_slot, present_value_slot=value_slot,
            **options,
        )  # fmt: skip

    def expected():
        return sdpa_reference(q, visible_k, visible_v, causal=causal, lower_right=True)

    within = of("scaled_dot_product_attention", dtype)

    slots = cache_k[:, :, position:end], cache_v[:, :, position:end]
    fused = nt._attention._present(seq_q, visible_k, visible_v, new_k, new_v, *slots)
    assert fused[2] == seq_q, "the kernel writes the entries: no copies"
    out = step(*slots)
    assert torch.equal(cache_k[:, :, position:end], new_k)
    assert torch.equal(cache_v[:, :, position:end], new_v)
    torch.testing.assert_close(out, expected().to(dtype), **within)
    # A slot that is not the attended tail: copied before the launch.
    cache_k[:, :, :end] = 0
    out = step(cache_k[:, :, :seq_q], cache_v[:, :, :seq_q])
    assert torch.equal(cache_k[:, :, :seq_q], new_k)
    torch.testing.assert_close(out, expected().to(dtype), **within)
    # Refused before anything is written.
    before = cache_k.clone()
    with pytest.raises(ValueError, match="broadcast"):
        sdpa(
            q, visible_k, visible_v, torch.ones(3, end, dtype=torch.bool, device="cuda"),
            enable_gqa=True, present_key=new_k, present_value=new_v,
            present_key_slot=cache_k[:, :, end : end + seq_q],
            present_value_slot=cache_v[:, :, end : end + seq_q],
        )  # fmt: skip
    assert torch.equal(cache_k, before)


def test_attention_errors(nt):
    q, k = values((1, 4, 8, 64), torch.float16), values((1, 2, 8, 64), torch.float16)
    sdpa = nt.scaled_dot_product_attention
    cases = [
        (ValueError, "enable_gqa", lambda: sdpa(q, k, k)),
        (
            ValueError,
            "multiple",
            lambda: sdpa(
                q,
                values((1, 3, 8, 64), torch.float16),
                values((1, 3, 8, 64), torch.float16),
                enable_gqa=True,
            ),
        ),
        (ValueError, "dropout_p", lambda: sdpa(q, q, q, dropout_p=0.1)),
        (
            ValueError,
            "cannot be used together",
            lambda: sdpa(
                q, q, q, torch.ones(8, 8, dtype=torch.bool, device="cuda"), is_causal=True
            ),
        ),
        (
            ValueError,
            "broadcast",
            lambda: sdpa(q, q, q, torch.ones(7, 8, dtype=torch.bool, device="cuda")),
        ),
        (
            nt.NotBuiltError,
            "head_dim 80",
            lambda: sdpa(*(values((1, 2, 8, 80), torch.float16),) * 3),
        ),
        (ValueError, "together", lambda: sdpa(q, q, q, present_key=q)),
    ]
    for error, words, call in cases:
        with pytest.raises(error, match=words):
            call()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("interleaved", [True, False])
def test_rotary_position_embedding(nt, dtype, interleaved):
    batch, seq, heads, head_dim = 3, 17, 5, 128
    x = values((batch, seq, heads, head_dim), dtype)
    angles = torch.rand(seq, head_dim // 2, device="cuda") * 6
    sin, cos = angles.sin().to(dtype), angles.cos().to(dtype)
    half = head_dim // 2

    def reference(x):
        x0, x1 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :half], x[..., half:])
        s, c = sin[None, :, None, :].float(), cos[None, :, None, :].float()
        o0, o1 = x0.float() * c - x1.float() * s, x0.float() * s + x1.float() * c
        out = torch.stack((o0, o1), -1).flatten(-2) if interleaved else torch.cat((o0, o1), -1)
        return out.to(dtype)

    close(nt.rotary_position_embedding(x, sin, cos, interleaved), reference(x))
    close(
        nt.rotary_position_embedding(
            x.transpose(1, 2).contiguous().transpose(1, 2), sin, cos, interleaved
        ),
        reference(x),
    )
    y = x.clone()
    assert nt.rotary_position_embedding(y, sin, cos, interleaved, inplace=True) is y
    close(y, reference(x))
    with pytest.raises(ValueError, match="head_dim / 2"):
        nt.rotary_position_embedding(x, sin[:, :3], cos, interleaved)


@pytest.mark.parametrize("index", [torch.int64, torch.int32])
def test_embedding_reads_no_row_outside_the_weight(nt, index):
    """An index out of range, which torch asserts on, gives a row of zeros and reads
    nothing outside the weight (the memcheck run covers this test); the others gather
    as torch does, in a weight of any layout."""
    weight = torch.randn(48, 10, device="cuda", dtype=torch.float16).t()  # (10, 48)
    indices = torch.tensor([[0, 10, -1], [9, 2**31 - 1, 3]], device="cuda", dtype=index)
    out = nt.embedding(indices, weight)
    torch.cuda.synchronize()
    valid = (indices >= 0) & (indices < 10)
    expected = torch.nn.functional.embedding(indices.where(valid, 0), weight)
    assert out.shape == (2, 3, 48)
    assert torch.equal(out, expected * valid[..., None])
    assert not out[~valid].any()


def test_compilation_settings_belong_to_the_build(nt):
    nt.set_default_max_num_configs(4)
    # The wheel's own build command (its manifest keeps it), the setting changed.
    arches = ",".join(nt.manifest()["build"]["arches"])
    with pytest.raises(nt.NotBuiltError, match=rf"ntops-aot build --arch {arches} .*--num-warps 2"):
        nt.set_default_num_warps(2)
    with pytest.raises(nt.NotBuiltError, match="--num-stages 5"):
        nt.set_default_num_stages(5)
    with pytest.raises(ValueError, match="positive int"):
        nt.set_default_max_num_configs(0)


def test_phases_time_each_step_of_a_launch(nt):
    """`_C._phases` (host-cost work: tests/benchmarks/bench_launch.py --phases) runs
    launch()'s path, timing each step, and the kernel runs."""
    x, y, z = (torch.randn(4096, device="cuda") for _ in range(3))
    phases = nt._C._phases(nt._C.group("add-other=tensor"), 10, x, y, 1.0, z)
    steps = ["read", "check", "shapes", "allocate", "layout", "choose", "stream", "launch"]
    assert list(phases) == [*steps, "after"]
    assert all(value >= 0 for value in phases.values())
    assert phases["launch"] > 0
    torch.testing.assert_close(z, x + y)
