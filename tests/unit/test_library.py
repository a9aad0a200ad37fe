"""The torch.library ops without a GPU: every public function, called on fake CUDA
tensors (what torch.compile, torch.export and FakeTensorMode pass around), goes to its
op and comes back with torch's shape, dtype, device and strides; and importing the
wheel registers them without importing a compiler.

The calls are every declared function's (tests/calls.py): nothing here lists an op."""

import subprocess
import sys
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests import calls as generated

H = torch.float16
# What a refusal may raise, ours or torch's.
REFUSALS = (RuntimeError, TypeError, ValueError, NotImplementedError, IndexError)


def cuda(*shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="cuda")


def calls(nt):
    """Every declared function's calls (tests/calls.py), from the wheel's declarations,
    in both layouts."""
    dtypes = {op: info["dtypes"] for op, info in nt.manifest()["ops"].items()}
    return generated.calls(nt._ops.APIS, dtypes, generated.LAYOUTS)


class NoDevice(Exception):
    """This torch asked for the GPU it lacks to handle a fake CUDA tensor (a CPU-only
    build for a view or a copy, a CUDA build without a driver for a copy): the call
    cannot be checked here, and is where a GPU is (tests/gpu/test_compile.py's
    opcheck)."""


# What torch says when it reaches for an absent GPU.
_ABSENT = (
    "not linked with support for cuda",
    "CUDA driver version is insufficient",
    "NVIDIA driver",
)


def _no_device(error):
    return (
        isinstance(error, RuntimeError)
        and not torch.cuda.is_available()
        and any(words in str(error) for words in _ABSENT)
    )


def answer(function, arguments):
    """What `function` returns for `arguments`, or the refusal it raises."""
    args, kwargs = arguments
    try:
        return function(*args, **kwargs), None
    except REFUSALS as error:
        if _no_device(error):
            raise NoDevice(str(error).splitlines()[0]) from error
        return None, error


def difference(nt, call, api, reference_on="cuda"):
    """How ours differs from torch's answer to `call` on fake CUDA tensors (None: it
    does not): the refusal, the result's type, shape, dtype, device and strides, and
    the tensor an out= or in-place call returns. The reference runs on fake tensors of
    `reference_on`, or on the meta device where this torch reaches for the absent GPU
    (the same meta kernels compute a fake tensor's metadata)."""
    make = generated.on("cuda")
    ours = call.arguments(make)
    theirs = call.arguments(generated.on(reference_on))
    reference = generated.reference(call, api)
    try:
        want, refused = answer(reference, theirs)
    except NoDevice:
        theirs = call.arguments(generated.on("meta"))
        want, refused = answer(reference, theirs)
    got, error = answer(getattr(nt, call.name), ours)
    if refused is not None or error is not None:
        if refused is None or error is None:
            return f"torch: {refused!r}; ours: {error!r}"
        return None
    if isinstance(want, tuple):  # several results (attention's output and log-sum-exp)
        if not isinstance(got, tuple) or len(got) != len(want):
            return f"ours is {type(got).__name__}, torch's a tuple of {len(want)}"
        for index, (one, theirs_one) in enumerate(zip(got, want, strict=True)):
            mine, theirs_ = ((t.shape, t.dtype) for t in (one, theirs_one))
            if mine != theirs_ or one.device.type != "cuda":
                return f"result {index}: ours {one.device} {mine}; torch's {theirs_}"
        return None
    if type(got) is not type(want) and want.device.type == "cuda":
        return f"ours is a {type(got).__name__}, torch's a {type(want).__name__}"
    # Strides are torch's rules where the reference is torch's own function; a
    # composition's (the wheel's rotation, attention after cache writes) are its own,
    # and opcheck compares the fake's with the kernel's (tests/gpu/test_compile.py).
    torchs = call.reference is None and api["reference"].startswith("torch.")
    mine, theirs_ = ((t.shape, t.dtype, t.stride() if torchs else None) for t in (got, want))
    if mine != theirs_ or got.device.type != "cuda":
        return f"ours: {got.device} {mine}; torch's: {want.device} {theirs_}"
    for written, name in ((theirs[1].get("out"), "out"), (theirs[0][0], "input")):
        if want is written:
            mine = ours[1]["out"] if name == "out" else ours[0][0]
            if got is not mine:
                return f"torch returns its {name} tensor, ours another"
    return None


@pytest.fixture
def fake():
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        yield mode


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_every_function_on_fake_tensors_gives_torchs_metadata(installed, fake):
    """Every declared function's calls (its samples as they are, with out= and in
    place, contiguous and transposed, and its tests/ops module's) go to its op and come
    back as torch's answer does."""
    apis = {api["name"]: api for api in installed._ops.APIS}
    problems, unchecked, checked = [], [], set()
    for call in calls(installed):
        try:
            problem = difference(installed, call, apis[call.name])
        except NoDevice as refusal:
            unchecked.append(f"{call.label} ({refusal})")
            continue
        checked.add(call.name)
        if problem:
            problems.append((call.name, f"{call.label}: {problem}"))
    fixed = sorted(set(generated.KNOWN) - {name for name, _ in problems})
    assert not fixed, f"fixed: remove {fixed} from tests/calls.py's KNOWN"
    problems = [problem for name, problem in problems if name not in generated.KNOWN]
    assert not problems, "\n".join(problems)
    assert checked == set(apis), f"no call checked for {sorted(set(apis) - checked)}"
    if unchecked:
        warnings.warn("left unchecked without a GPU: " + "; ".join(unchecked), stacklevel=1)


def test_the_declared_calls_reach_every_declared_overload(installed, fake):
    """opcheck (tests/gpu/test_compile.py) checks the ops the declared calls reach as
    torch.compile makes them: here, on fake tensors, that they reach every overload
    each function declares (samples without a number never reach `.Scalar`)."""
    from tests.gpu.test_compile import opcheck_calls, overloads, reached

    dtypes = {op: info["dtypes"] for op, info in installed.manifest()["ops"].items()}
    seen = set()
    for call in opcheck_calls(installed._ops.APIS, dtypes):
        ops, _ = reached(installed, call, generated.on("cuda"))  # a fake may then fail
        seen |= {str(op).removeprefix("ntops_prebuilt.") for op, _, _ in ops}
    missing = {
        api["name"]: sorted(overloads(api) - seen)
        for api in installed._ops.APIS
        if api["name"] not in generated.KNOWN
    }
    assert not any(missing.values()), {name: found for name, found in missing.items() if found}


def test_every_public_function_has_its_op(installed):
    names = {name for name in installed.torch.__all__ if not name.startswith("set_")}
    names.discard("CausalVariant")
    # A wrapper's other functions (flash_attn_varlen_func) call its op (paged_attention).
    names -= installed.torch.EXPORTED
    ops = torch.ops.ntops_prebuilt
    assert all(hasattr(ops, name) for name in names), sorted(
        n for n in names if not hasattr(ops, n)
    )
    assert str(ops.add.out._schema).endswith("Tensor(a!) out) -> ()")
    assert str(ops.relu_.default._schema) == "ntops_prebuilt::relu_(Tensor(a!) input) -> ()"


def test_kv_cache_writes_are_copies_a_graph_can_order(installed, fake):
    """With a KV cache, the traced call is the cache writes, then attention over the
    caches: torch's functionalization then keeps them in order. On fake CUDA tensors
    where torch is built with CUDA; a CPU-only torch refuses to slice those (its CUDA
    device guard is missing), so there the fake tensors are meta ones, which take the
    same route (the launcher sends every subclass to the op before it looks at devices)."""
    device = "cuda" if torch.backends.cuda.is_built() else "meta"
    q, cache = (torch.empty(s, dtype=H, device=device) for s in ((1, 32, 1, 128), (1, 8, 64, 128)))
    new = torch.empty(1, 8, 1, 128, dtype=H, device=device)
    version = cache._version
    out = installed.scaled_dot_product_attention(
        q, cache, cache, enable_gqa=True, present_key=new, present_value=new,
        present_key_slot=cache[:, :, 63:], present_value_slot=cache[:, :, 63:],
    )  # fmt: skip
    assert out.shape == q.shape
    assert cache._version == version + 2


def test_traced_calls_follow_a_mutation_of_a_dict_the_frame_was_given(installed):
    """transformers' models pop the compiled frame's `kwargs` (`can_return_tuple`)
    before their first layer; from then on Dynamo breaks the graph at any read of a
    mapping proxy (inspect.Signature's parameters were one), so the routes read none.
    On the meta device, whose tensors the ops' fakes serve as they serve fake CUDA ones."""
    x = torch.randn(4, 8, dtype=H).to("meta")

    def forward(x, **kwargs):
        kwargs.pop("return_dict")
        y = installed.mm(x, x.t())
        return installed.add(y, y, alpha=kwargs.pop("alpha")), y

    torch._dynamo.reset()
    out, y = torch.compile(forward, backend="eager", fullgraph=True)(x, return_dict=True, alpha=2)
    assert (out.shape, y.shape, out.device.type) == ((4, 4), (4, 4), "meta")
    route = installed._library.traced("mm")  # binding as Python does, with its errors
    for args, kwargs, why in (
        ((x,), {}, "mm\\(\\) missing a required argument: 'mat2'"),
        ((x, x, x), {}, "takes 2 positional arguments but 3 were given"),
        ((x,), {"input": x, "mat2": x}, "multiple values for argument 'input'"),
        ((x, x.t()), {"bias": x}, "unexpected keyword argument 'bias'"),
    ):
        with pytest.raises(TypeError, match=why):
            route(*args, **kwargs)
    assert route(x, mat2=x.t()).shape == (4, 4)


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


def test_max_pools_take_paddings_past_half_the_kernel_as_upstream(installed):
    """Upstream's call max_pool1d(x, 2, stride=2, padding=2), which torch refuses: the
    ops' fakes give its shape (torch's formula, which holds for any padding) where
    torch's F raises, on FakeTensorMode's tensors and under torch.compile with dynamic
    shapes; negative paddings and empty outputs stay refused, and the average pools
    keep torch's limit (upstream's tests never pass them more)."""
    F = torch.nn.functional
    device = "cuda" if torch.backends.cuda.is_built() else "meta"  # (a CPU build's views)
    with FakeTensorMode():
        line = torch.empty(2, 3, 17, device=device)
        with pytest.raises(RuntimeError, match="half of kernel size"):
            F.max_pool1d(line, 2, 2, 2)
        for ceil_mode in (False, True):  # 10 windows both: ceil_mode's 11th starts at 19
            values, indices = installed.max_pool1d(
                line, 2, 2, padding=2, ceil_mode=ceil_mode, return_indices=True
            )
            assert values.shape == indices.shape == (2, 3, 10)
            assert (values.dtype, indices.dtype) == (torch.float32, torch.int64)
        assert installed.max_pool1d(line[0], 3, 1, padding=3).shape == (3, 21)
        image = torch.empty(2, 3, 9, 11, device=device).contiguous(
            memory_format=torch.channels_last
        )
        got = installed.max_pool2d(image, (2, 3), (1, 2), (2, 3), ceil_mode=True)
        assert got.shape == (2, 3, 11, 7)  # ceil_mode drops the windows starting past the input
        assert got.is_contiguous(memory_format=torch.channels_last)
        cube = torch.empty(1, 2, 5, 6, 7, device=device)
        assert installed.max_pool3d(cube, 2, 2, (2, 1, 2)).shape == (1, 2, 4, 4, 5)
        with pytest.raises(RuntimeError, match="max_pool1d: pad should be at least zero"):
            installed.max_pool1d(line, 2, 2, padding=-1)
        with pytest.raises(RuntimeError, match=r"max_pool1d: .*Output size is too small"):
            installed.max_pool1d(line, 30, padding=6)
        with pytest.raises(RuntimeError, match="at most half of"):
            installed.avg_pool2d(image, 3, padding=2)
    torch._dynamo.reset()
    pool = torch.compile(
        lambda x: installed.max_pool1d(x, 2, 2, padding=2, return_indices=True),
        backend="eager",
        fullgraph=True,
        dynamic=True,
    )
    for length in (17, 40):
        values, indices = pool(torch.empty(2, 3, length, device="meta"))
        assert values.shape == indices.shape == (2, 3, length // 2 + 2)
