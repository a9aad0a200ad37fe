"""The torch.library ops without a GPU: every public function, called on fake CUDA
tensors (what torch.compile, torch.export and FakeTensorMode pass around), goes to its
op and comes back with torch's shape, dtype, device and strides; and importing the
wheel registers them without importing a compiler."""

import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

F = torch.nn.functional
H = torch.float16


def cuda(*shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="cuda")


def calls(nt):
    """(name, our call, torch's call) for every op and overload."""
    x, y = cuda(4, 8), cuda(8)
    t = cuda(8, 4).t()  # strided: outputs follow torch's stride rules
    h, w = cuda(2, 6, 16, dtype=H), cuda(16, dtype=H)
    flags = cuda(4, 8, dtype=torch.int32)
    out, bools = cuda(4, 8), cuda(4, 8, dtype=torch.bool)
    rows = []
    for name in ("abs", "neg", "exp", "rsqrt", "sin", "cos", "sigmoid", "tanh"):
        ours, theirs = getattr(nt, name), getattr(torch, name)
        rows += [
            (name, lambda o=ours: o(t), lambda f=theirs: f(t)),
            (f"{name}.out", lambda o=ours: o(x, out=out), lambda f=theirs: f(x, out=out)),
        ]
    rows += [
        ("bitwise_not", lambda: nt.bitwise_not(flags), lambda: torch.bitwise_not(flags)),
        ("isnan", lambda: nt.isnan(t), lambda: torch.isnan(t)),
        ("isinf", lambda: nt.isinf(h), lambda: torch.isinf(h)),
    ]
    for name in ("add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge", "pow"):
        ours, theirs = getattr(nt, name), getattr(torch, name)
        target = bools if name in ("eq", "ne", "lt", "le", "gt", "ge") else out
        rows += [
            (f"{name}.Tensor", lambda o=ours: o(t, y), lambda f=theirs: f(t, y)),
            (f"{name}.Scalar", lambda o=ours: o(h, 2.0), lambda f=theirs: f(h, 2.0)),
            (f"{name}.out", lambda o=ours, b=target: o(x, y, out=b),
             lambda f=theirs, b=target: f(x, y, out=b)),
        ]  # fmt: skip
    rows += [
        ("add alpha", lambda: nt.add(x, y, alpha=3), lambda: torch.add(x, y, alpha=3)),
        ("div floor", lambda: nt.div(x, 2, rounding_mode="floor"),
         lambda: torch.div(x, 2, rounding_mode="floor")),
        ("bitwise_and", lambda: nt.bitwise_and(flags, 3), lambda: torch.bitwise_and(flags, 3)),
        ("bitwise_or", lambda: nt.bitwise_or(flags, flags), lambda: torch.bitwise_or(flags, flags)),
        ("clamp", lambda: nt.clamp(t, -1, 1), lambda: torch.clamp(t, -1, 1)),
        ("clamp.out", lambda: nt.clamp(x, max=1, out=out), lambda: torch.clamp(x, max=1, out=out)),
        ("clamp.Tensor", lambda: nt.clamp(t, y, t), lambda: torch.clamp(t, y, t)),
        ("clamp.Tensor broadcast", lambda: nt.clamp(y, x), lambda: torch.clamp(y, x)),
        ("clamp.Tensor_out", lambda: nt.clamp(x, None, t, out=out),
         lambda: torch.clamp(x, None, t, out=out)),
        ("relu", lambda: nt.relu(t), lambda: F.relu(t)),
        ("relu_", lambda: nt.relu(x, inplace=True), lambda: F.relu(x, inplace=True)),
        ("silu", lambda: nt.silu(h), lambda: F.silu(h)),
        ("silu_", lambda: nt.silu(x, inplace=True), lambda: F.silu(x, inplace=True)),
        ("gelu", lambda: nt.gelu(t, approximate="tanh"), lambda: F.gelu(t, approximate="tanh")),
        ("silu_mul", lambda: nt.silu_mul(t, y), lambda: torch.mul(t, y)),
        ("silu_mul.out", lambda: nt.silu_mul(x, y, out=out), lambda: torch.mul(x, y, out=out)),
        ("dropout", lambda: nt.dropout(h, 0.1), lambda: F.dropout(h, 0.1)),
        ("dropout_", lambda: nt.dropout(x, 0.1, inplace=True),
         lambda: F.dropout(x, 0.1, inplace=True)),
        ("softmax", lambda: nt.softmax(h, 1), lambda: torch.softmax(h, 1)),
        ("softmax dtype", lambda: nt.softmax(h, -1, dtype=torch.float32),
         lambda: torch.softmax(h, -1, dtype=torch.float32)),
        ("softmax float64", lambda: nt.softmax(h, 1, dtype=torch.float64),
         lambda: torch.softmax(h, 1, dtype=torch.float64)),
        ("rms_norm", lambda: nt.rms_norm(h, (16,), w), lambda: F.rms_norm(h, (16,), w)),
        ("rms_norm 2 dims", lambda: nt.rms_norm(h, (6, 16)), lambda: F.rms_norm(h, (6, 16))),
        ("layer_norm", lambda: nt.layer_norm(h, [16], w, w),
         lambda: F.layer_norm(h, [16], w, w)),
        ("mm", lambda: nt.mm(t, x.t()), lambda: torch.mm(t, x.t())),
        ("mm.out", lambda: nt.mm(x.t(), x, out=cuda(8, 8)),
         lambda: torch.mm(x.t(), x, out=cuda(8, 8))),
        ("bmm", lambda: nt.bmm(h, h.transpose(1, 2)), lambda: torch.bmm(h, h.transpose(1, 2))),
        ("addmm", lambda: nt.addmm(y, x.t(), x, beta=0.5),
         lambda: torch.addmm(y, x.t(), x, beta=0.5)),
        ("matmul 1-D", lambda: nt.matmul(t, y), lambda: torch.matmul(t, y)),
        ("matmul 3-D @ 2-D", lambda: nt.matmul(h, w.unsqueeze(1).expand(16, 5)),
         lambda: torch.matmul(h, w.unsqueeze(1).expand(16, 5))),
        ("matmul.out", lambda: nt.matmul(x, x.t(), out=cuda(4, 4)),
         lambda: torch.matmul(x, x.t(), out=cuda(4, 4))),
    ]  # fmt: skip
    q, k = cuda(1, 32, 5, 128, dtype=H), cuda(1, 8, 40, 128, dtype=H)
    sin = cuda(5, 64, dtype=H)
    heads = k.unsqueeze(2).expand(1, 8, 4, 40, 128).reshape(1, 32, 40, 128)  # GQA's repeats
    rows += [
        ("scaled_dot_product_attention",
         lambda: nt.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True),
         # enable_gqa's heads spelled out: torch 2.4 (the oldest the wheel takes) lacks it
         lambda: F.scaled_dot_product_attention(q, *[heads] * 2, is_causal=True)),
        ("rotary_position_embedding",
         lambda: nt.rotary_position_embedding(q.transpose(1, 2), sin, sin),
         lambda: torch.empty_like(q.transpose(1, 2))),
    ]  # fmt: skip
    return rows


@pytest.fixture
def fake():
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        yield mode


def test_every_function_on_fake_tensors_gives_torchs_metadata(installed, fake):
    for name, ours, theirs in calls(installed):
        got, want = ours(), theirs()
        assert type(got) is type(want), name
        assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device), name
        assert got.stride() == want.stride(), (name, got.stride(), want.stride())


def test_every_public_function_has_its_op(installed):
    names = {name for name in installed.torch.__all__ if not name.startswith("set_")}
    names.discard("CausalVariant")
    ops = torch.ops.ntops_prebuilt
    assert all(hasattr(ops, name) for name in names), sorted(
        n for n in names if not hasattr(ops, n)
    )
    assert str(ops.add.out._schema).endswith("Tensor(a!) out) -> ()")
    assert str(ops.relu_.default._schema) == "ntops_prebuilt::relu_(Tensor(a!) input) -> ()"


def test_kv_cache_writes_are_copies_a_graph_can_order(installed, fake):
    """With a KV cache, the traced call is the cache writes, then attention over the
    caches: torch's functionalization then keeps them in order."""
    q, cache = cuda(1, 32, 1, 128, dtype=H), cuda(1, 8, 64, 128, dtype=H)
    new = cuda(1, 8, 1, 128, dtype=H)
    version = cache._version
    out = installed.scaled_dot_product_attention(
        q, cache, cache, enable_gqa=True, present_key=new, present_value=new,
        present_key_slot=cache[:, :, 63:], present_value_slot=cache[:, :, 63:],
    )  # fmt: skip
    assert out.shape == q.shape
    assert cache._version == version + 2


def test_importing_the_wheel_imports_no_compiler(installed):
    code = (
        f"import sys; sys.path.insert(0, {str(installed.__path__[0].rsplit('/', 1)[0])!r})\n"
        "import ntops_prebuilt, torch\n"
        "assert hasattr(torch.ops.ntops_prebuilt, 'add')\n"
        "loaded = [m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_attention_on_fake_int_tensors_is_refused_as_torch_refuses_real_ones(installed, fake):
    """The op's fake checks what no kernel table tells it: attention is over floats."""
    q = cuda(1, 4, 3, 32, dtype=torch.int32)
    with pytest.raises(TypeError, match="scaled_dot_product_attention: query must be a float"):
        installed.scaled_dot_product_attention(q, q, q)


def test_the_ops_fakes_refuse_what_torch_refuses(installed, fake):
    """Traced and subclass calls get torch's answers where no kernel table is asked: the
    fuzz found each of these accepted on fake tensors while torch refused or aliased."""
    x, h = cuda(4, 8), cuda(2, 8, 3, 7, dtype=H)
    with pytest.raises(RuntimeError, match="dtype"):
        installed.mm(x, x.t(), out=cuda(4, 4, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="silu_mul"):
        installed.silu_mul(*[cuda(9, dtype=torch.int16)] * 2)
    with pytest.raises(ValueError, match="even head_dim"):
        installed.rotary_position_embedding(h, cuda(8, 3, dtype=H), cuda(8, 3, dtype=H))
    assert installed.dropout(x, 0.9, training=False) is x  # torch returns input itself
    assert installed.dropout(x, 0.0) is x
