"""The runtime's Python layer without a GPU: what each function hands the launcher
(recorded in place of launching), and the errors it raises before anything runs."""

import importlib

import pytest
import torch

from tests.subclasses import Wrapper

H = torch.float16


# The runtime's modules that launch kernels: the rendered functions and the wrappers.
RUNTIME_MODULES = (
    "_functions", "_clamp", "_dropout", "_silu_mul", "_matmul", "_rows", "_attention",
    "_rotary", "_embedding",
)  # fmt: skip


@pytest.fixture
def launches(installed, monkeypatch):
    """Every launch the runtime asks for, as (group, args); none is made."""
    calls = []

    def record(group, *args):
        calls.append((group, args))
        outputs = [a for a in args if isinstance(a, torch.Tensor)]
        return args[-1] if isinstance(args[-1], torch.Tensor) else torch.empty_like(outputs[0])

    def product(group, *args):
        """As the launcher allocates a product: of its operands' rows and columns."""
        calls.append((group, args))
        if args[-1] is not None:
            return args[-1]
        left, right = [a for a in args[:-1] if isinstance(a, torch.Tensor)][-2:]
        return left.new_empty(*left.shape[:-1], right.shape[-1])

    for module in RUNTIME_MODULES:
        launch = product if module == "_matmul" else record
        monkeypatch.setattr(importlib.import_module(f"ntops_prebuilt.{module}"), "_launch", launch)
    return calls


def test_rms_norm_without_eps_takes_floats_epsilon_as_torch_does(installed, launches):
    installed.rms_norm(torch.randn(4, 64, dtype=H), (64,))
    _, (_, eps, _, _) = launches[-1]  # (rows, eps, welford, out)
    assert eps == torch.finfo(torch.float32).eps


def test_rms_norm_says_which_of_torchs_kernels_it_follows(installed, launches):
    """torch's Welford kernel (NaN rows where a row holds an infinity) runs for rows
    of a length not a multiple of 4 and for misaligned tensors; its vectorized one
    for the rest, whatever their strides (it copies them contiguous)."""
    base = torch.randn(8, 66, dtype=H)
    weight = torch.randn(65, dtype=H)
    for input, w, welford in (
        (base[:, :64], None, 0),  # strided: torch copies it
        (base[:, :64].contiguous(), weight[:64], 0),
        (base[:, :63], None, 1),
        (base.view(-1)[2 : 2 + 8 * 64].view(8, 64), None, 1),  # 4 bytes off
        (base[:, :64].contiguous(), weight[1:], 1),
        (base.view(-1)[4 : 4 + 8 * 64].view(8, 64), None, 0),  # 8 bytes: aligned
    ):
        installed.rms_norm(input, (input.shape[-1],), w)
        assert launches[-1][1][-2] == welford, (input.stride(), input.storage_offset())


def test_a_zero_dim_tensor_meeting_a_cpu_zero_dim_tensor_is_promoted(installed, launches):
    half = torch.tensor(2.5, dtype=H)
    for op in ("add", "sub", "mul", "div", "pow", "eq"):
        getattr(installed, op)(half, torch.tensor(3.0))
        assert launches[-1][1][0].dtype == torch.float32, op
    installed.add(half, torch.tensor(3.0, dtype=H))
    assert launches[-1][1][0] is half
    installed.add(torch.randn(3, dtype=H), torch.tensor(3.0))  # a dimensioned input keeps its dtype
    assert launches[-1][1][0].dtype == H


def test_matmul_with_an_empty_inner_dim_still_folds_its_rows(installed, launches):
    assert installed.matmul(torch.randn(2, 3, 0), torch.randn(0, 4)).shape == (2, 3, 4)
    _, (rows, _, out) = launches[-1]
    assert rows.shape == (6, 0)
    assert out is None  # the launcher allocates the product
    assert installed.matmul(torch.randn(0, 2, 3, 5), torch.randn(5, 4)).shape == (0, 2, 3, 4)
    assert launches[-1][1][0].shape == (0, 5)


def test_row_functions_copy_layouts_the_wheel_has_no_kernels_for(installed, monkeypatch):
    """A permuted input whose leading dims do not merge is launched once as it is,
    then, refused, once more as a contiguous copy."""
    seen = []

    def launch(group, rows, *rest):
        seen.append(rows.is_contiguous())
        if not rows.is_contiguous():
            raise installed.NotBuiltError("no kernel for these dims")
        return torch.empty_like(rows)

    monkeypatch.setattr(installed._rows, "_launch", launch)
    x = torch.randn(4, 6, 8, 10, dtype=H).permute(0, 2, 3, 1)
    assert installed.softmax(x, 1).shape == x.shape
    assert seen == [False, True]
    contiguous = torch.randn(4, 6, dtype=H)
    seen.clear()
    monkeypatch.setattr(installed._rows, "_launch", lambda *a: (_ for _ in ()).throw(
        installed.NotBuiltError("no fp16")))  # fmt: skip
    with pytest.raises(installed.NotBuiltError, match="no fp16"):
        installed.softmax(contiguous, -1)


def test_dims_and_dtypes_torch_refuses(installed, launches):
    with pytest.raises(IndexError, match="softmax: dim 1 is out of range"):
        installed.softmax(torch.tensor(1.0, dtype=H), 1)
    installed.softmax(torch.tensor(1.0, dtype=H), -1)
    with pytest.raises(TypeError, match=r"matmul: out is torch\.uint8"):
        installed.matmul(
            torch.randn(2, 3, 4), torch.randn(4), out=torch.empty(2, 3, dtype=torch.uint8)
        )


def test_addmm_into_its_own_input(installed, launches):
    out, a, b = torch.randn(8, 16), torch.randn(8, 4), torch.randn(4, 16)
    with pytest.raises(ValueError, match="addmm: input and out overlap"):
        installed.addmm(out[0], a, b, out=out)
    installed.addmm(out, a, b, out=out)
    bias = launches[-1][1][0]
    assert bias.data_ptr() != out.data_ptr()  # read from a copy
    assert torch.equal(bias, out)
    bias = torch.randn(16)
    installed.addmm(bias, a, b, out=out)  # apart: read in place, broadcast by the launcher
    assert launches[-1][1][0] is bias


def test_attention_errors_come_before_any_cache_write(installed, launches):
    sdpa = installed.scaled_dot_product_attention
    q, k = torch.randn(1, 4, 1, 64, dtype=H), torch.randn(1, 4, 10, 64, dtype=H)
    with pytest.raises(TypeError, match=r"present_key_slot must be a torch\.Tensor"):
        sdpa(q, k, k, present_key=k[:, :, :1], present_key_slot=10)
    with pytest.raises(ValueError, match="key and value have no heads"):
        sdpa(q, k[:, :0], k[:, :0], enable_gqa=True)
    with pytest.raises(TypeError, match=r"value is torch\.float32"):
        sdpa(q, k, k.float())
    cache_k, cache_v = torch.randn(1, 4, 16, 64, dtype=H), torch.randn(1, 4, 16, 64, dtype=H)
    before = cache_k.clone(), cache_v.clone()
    new = torch.randn(1, 4, 1, 64, dtype=H)
    for mask in (torch.ones(1, 1, 1, 16, dtype=torch.int32), torch.ones(1, 1, 1, 16)):
        with pytest.raises(TypeError, match=r"attn_mask must be bool or torch\.float16"):
            sdpa(
                q, cache_k, cache_v, mask, present_key=new, present_value=new,
                present_key_slot=cache_k[:, :, :1], present_value_slot=cache_v[:, :, :1],
            )  # fmt: skip
    assert torch.equal(cache_k, before[0])
    assert torch.equal(cache_v, before[1])
    assert not launches


def test_dispatch_subclasses_get_the_op_before_a_torch_op_unwraps_them(installed, launches):
    """softmax(dtype=) converts first: the conversion, run by the subclass, gave a plain
    tensor the launcher took (a negative view's values came out as its memory). Now the
    subclass is handed the op (here on the CPU, which has no kernel for it)."""
    ops = torch.ops.ntops_prebuilt
    wrapped = Wrapper(torch.randn(8, 16, dtype=H))
    for call, op in (
        (lambda: installed.softmax(wrapped, -1, dtype=torch.float32), ops.softmax.default),
        (lambda: installed.rms_norm(wrapped, (16,)), ops.rms_norm.default),
        (lambda: installed.matmul(wrapped, torch.randn(16, 4, dtype=H)), ops.matmul.default),
    ):
        Wrapper.seen.clear()
        with pytest.raises(NotImplementedError, match="ntops_prebuilt::"):
            call()
        assert Wrapper.seen == [op]
    assert launches == []
    parameter = torch.nn.Parameter(torch.randn(8, 16, dtype=H), requires_grad=False)
    installed.softmax(parameter, -1)  # a subclass that leaves dispatch alone launches
    assert launches[-1][1][0] is parameter


def test_pow_refuses_an_exponent_the_inputs_dtype_cannot_hold(installed, launches):
    """torch converts a scalar exponent to the input's dtype, and refuses an overflow."""
    with pytest.raises(RuntimeError, match=r"pow: exponent 100000\.0 cannot be converted"):
        installed.pow(torch.randn(4, dtype=H), 1e5)
    assert launches == []
    installed.pow(torch.randn(4, dtype=H), float("inf"))  # inf converts
    installed.pow(torch.randn(4), 1e5)
    assert [args[1] for _, args in launches] == [float("inf"), 1e5]
