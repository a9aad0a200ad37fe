"""torch semantics of each function: odd shapes, non-contiguous and broadcast inputs,
every switch, and the errors bad input must get."""

import pytest
import torch

from tests.tolerances import tolerance

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
ODD = (6, 42, 123)


def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, device="cuda").to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_odd_shapes_and_views(nt, dtype):
    x, y = randn(*ODD, dtype=dtype), randn(*ODD, dtype=dtype)
    views = [
        (x, y),
        (x.transpose(0, 2), y.transpose(0, 2)),  # dense in another order: merges to 1 dim
        (x[:, ::2, 1:], y[:, ::2, 1:]),  # strided and unaligned
        (x.permute(1, 2, 0), y.transpose(0, 1).transpose(1, 2)),
    ]
    within = tolerance(dtype)
    for a, b in views:
        torch.testing.assert_close(nt.add(a, b, alpha=2), torch.add(a, b, alpha=2), **within)
        torch.testing.assert_close(nt.mul(a, b), a * b, **within)
        for approximate in ("none", "tanh"):
            expected = torch.nn.functional.gelu(a, approximate=approximate)
            torch.testing.assert_close(nt.gelu(a, approximate=approximate), expected, **within)


def test_dense_views_merge_to_one_dim(nt):
    x = randn(*ODD).transpose(0, 2)
    nt.add(x, x)
    assert "-nd1-" in nt._C.last_kernel()


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcasting(nt, dtype):
    x = randn(6, 42, 123, dtype=dtype)
    for other in (
        randn(123, dtype=dtype),
        randn(42, 1, dtype=dtype),
        randn(6, 1, 123, dtype=dtype),
    ):
        torch.testing.assert_close(nt.add(x, other), x + other, **tolerance(dtype))
        torch.testing.assert_close(nt.mul(other, x), other * x, **tolerance(dtype))
    column, row = randn(7, 1, dtype=dtype), randn(1, 5, dtype=dtype)
    torch.testing.assert_close(
        nt.add(column, row, alpha=-1.5), torch.add(column, row, alpha=-1.5), **tolerance(dtype)
    )


def test_out_and_in_place(nt):
    x, y = randn(*ODD), randn(*ODD)
    out = torch.empty_like(x)
    assert nt.add(x, y, out=out) is out
    torch.testing.assert_close(out, x + y)
    expected = x * y
    assert nt.mul(x, y, out=x) is x
    torch.testing.assert_close(x, expected)


def test_allocated_results_match_torch(nt):
    x = randn(*ODD, dtype=torch.float16)
    for result in (nt.add(x, x), nt.gelu(x), nt.softmax(x, 1), nt.rms_norm(x, (123,))):
        assert result.shape == x.shape
        assert result.dtype == x.dtype
        assert result.device == x.device
    wide = nt.add(randn(6, 1, 123), randn(42, 1))
    assert wide.shape == (6, 42, 123)


def test_empty_and_one_element(nt):
    empty = randn(0, 5)
    assert nt.add(empty, empty).shape == (0, 5)
    one = randn(1, 1, 1)
    torch.testing.assert_close(nt.mul(one, one), one * one)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(nt, dtype):
    x = randn(*ODD, dtype=dtype)
    for dim in (0, 1, 2, -1, -3):
        torch.testing.assert_close(nt.softmax(x, dim), torch.softmax(x, dim), **tolerance(dtype))
    torch.testing.assert_close(
        nt.softmax(x[:, 3:, ::2], -1), torch.softmax(x[:, 3:, ::2], -1), **tolerance(dtype)
    )
    long_rows = randn(3, 5000, dtype=dtype)  # several tiles per row
    within = tolerance(dtype)
    torch.testing.assert_close(nt.softmax(long_rows, 1), torch.softmax(long_rows, 1), **within)
    scalar = randn(dtype=dtype)
    torch.testing.assert_close(nt.softmax(scalar, 0), torch.softmax(scalar, 0))


def test_softmax_dtype_argument(nt):
    x = randn(*ODD, dtype=torch.float16)
    result = nt.softmax(x, -1, dtype=torch.float32)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result, torch.softmax(x, -1, dtype=torch.float32))
    masked = x.clone()
    masked[:, :, :60] = float("-inf")
    torch.testing.assert_close(
        nt.softmax(masked, -1), torch.softmax(masked, -1), **tolerance(torch.float16)
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(nt, dtype):
    x = randn(*ODD, dtype=dtype)
    weight = randn(123, dtype=dtype)
    f = torch.nn.functional.rms_norm

    def reference(input, shape, weight, eps):
        w = None if weight is None else weight.float()
        return f(input.float(), shape, w, eps).to(dtype)

    torch.testing.assert_close(
        nt.rms_norm(x, (123,), weight, 1e-5), reference(x, (123,), weight, 1e-5), **tolerance(dtype)
    )
    torch.testing.assert_close(
        nt.rms_norm(x, 123), reference(x, (123,), None, torch.finfo(dtype).eps), **tolerance(dtype)
    )
    weight2 = randn(42, 123, dtype=dtype)
    torch.testing.assert_close(
        nt.rms_norm(x, (42, 123), weight2),
        reference(x, (42, 123), weight2, torch.finfo(dtype).eps),
        **tolerance(dtype),
    )
    view = x.transpose(0, 1)
    torch.testing.assert_close(
        nt.rms_norm(view, (123,), weight),
        reference(view, (123,), weight, torch.finfo(dtype).eps),
        **tolerance(dtype),
    )
    vector = randn(4096, dtype=dtype)
    torch.testing.assert_close(
        nt.rms_norm(vector, (4096,)),
        reference(vector, (4096,), None, torch.finfo(dtype).eps),
        **tolerance(dtype),
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm(nt, dtype):
    a, b = randn(123, 77, dtype=dtype), randn(77, 45, dtype=dtype)
    expected = a.double() @ b.double()
    for left, right in ((a, b), (a.t().contiguous().t(), b), (a, b.t().contiguous().t())):
        error = (nt.mm(left, right).double() - expected).norm() / expected.norm()
        assert error < (1e-2 if dtype == torch.bfloat16 else 3e-3)


def test_mm_fp32_precision_follows_torch(nt):
    a, b = randn(64, 32), randn(32, 48)
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        result = nt.mm(a, b)
        assert "fp32_precision=ieee" in nt._C.last_kernel()
        torch.testing.assert_close(result, a @ b)
        torch.set_float32_matmul_precision("high")
        nt.mm(a, b)
        assert "fp32_precision=tf32" in nt._C.last_kernel()
    finally:
        torch.set_float32_matmul_precision(previous)


def test_mm_degenerate_sizes(nt):
    assert torch.equal(nt.mm(randn(5, 0), randn(0, 7)), torch.zeros(5, 7, device="cuda"))
    assert nt.mm(randn(0, 4), randn(4, 3)).shape == (0, 3)


def test_bad_input_gets_clear_errors(nt):
    x, cpu, square = randn(4, 5), torch.randn(4, 5), randn(4, 4)
    cases = [
        (TypeError, "CUDA", lambda: nt.add(cpu, cpu)),
        (TypeError, "other is on the CPU", lambda: nt.add(x, cpu)),
        (ValueError, "broadcast", lambda: nt.add(x, randn(3, 5))),
        (ValueError, "shape", lambda: nt.add(x, x, out=randn(4, 6))),
        (TypeError, "dtype", lambda: nt.add(x, x, out=randn(4, 5, dtype=torch.float16))),
        (TypeError, "dtype", lambda: nt.mul(x, x.half())),
        (ValueError, "stride-0", lambda: nt.add(x, x, out=randn(1, 5).expand(4, 5))),
        (
            ValueError,
            "overlap",
            lambda: nt.mul(x.view(-1)[1:], x.view(-1)[1:], out=x.view(-1)[:-1]),
        ),
        (ValueError, "overlap", lambda: nt.mm(square, square, out=square)),
        (TypeError, "a tensor or a Python number", lambda: nt.add(x, [1, 2])),
        (TypeError, "number", lambda: nt.add(x, x, alpha="2")),
        (ValueError, "approximate", lambda: nt.gelu(x, approximate="fast")),
        (IndexError, "dim", lambda: nt.softmax(x, 2)),
        (ValueError, "normalized_shape", lambda: nt.rms_norm(x, (4,))),
        (ValueError, "weight", lambda: nt.rms_norm(x, (5,), randn(4))),
        (ValueError, "inner dims", lambda: nt.mm(x, randn(4, 5))),
        (ValueError, "2-D", lambda: nt.mm(randn(2, 4, 5), randn(5, 3))),
        (ValueError, "result has shape", lambda: nt.mm(x, randn(5, 3), out=randn(4, 4))),
    ]
    for error, words, call in cases:
        with pytest.raises(error, match=words):
            call()


def test_not_built_names_what_exists_and_the_command(nt):
    x = randn(4, 5, dtype=torch.float64)
    with pytest.raises(nt.NotBuiltError) as caught:
        nt.add(x, x)
    message = str(caught.value)
    assert "float64" in message
    assert "fp16" in message
    assert "sm_" in message


def test_large_tensor_uses_64_bit_indexing(nt):
    n = 2**31 + 4099
    x = torch.full((n,), 1.5, dtype=torch.float16, device="cuda")
    y = torch.full((n,), 0.25, dtype=torch.float16, device="cuda")
    y[-7:] = 3.0
    out = nt.add(x, y)
    assert nt._C.last_kernel().endswith("/i64")
    assert out[: n - 7].eq(1.75).all()
    assert out[-7:].eq(4.5).all()
    del x, y, out
    torch.cuda.empty_cache()


def test_launches_land_on_the_current_stream(nt):
    x, out = torch.ones(1 << 20, device="cuda"), torch.empty(1 << 20, device="cuda")
    stream = torch.cuda.Stream()  # does not wait for the default stream, nor it for this one
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)  # a launch on another stream would overtake the fill
        x.fill_(2.0)
        nt.mul(x, x, out=out)
    stream.synchronize()
    assert out.eq(4.0).all()
