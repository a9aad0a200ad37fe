"""Each kernel's math, on the CPU: the kernel files' arrangement and application run
through ninetoothed's JIT under Triton's interpreter (numpy, no GPU) and are compared
with torch. The GPU suite checks the compiled cubins; this catches a wrong kernel in
CI, before any GPU sees it. Triton's interpreter has no libdevice: its functions
return nothing there, so while a kernel runs they are numpy's or torch's
(`numpy_libdevice`): the checks cover the kernels' own arithmetic, branches and
parameters, and leave libdevice's accuracy to the GPU suite. What the interpreter
cannot run at all is left to the GPU suite (`LEFT_TO_THE_GPU`, with the reason).

Every other ordinary op's kernel runs as its declaration describes it
(`test_ordinary_ops`: a new kernel file needs no test here); the checks by hand go
further (special values, views, half types) and are the only ones for composite ops.
Each names the ops it runs, and runs each of them (`interpreted(check, *ops)`): a
unit test (tests/unit/test_coverage.py) fails for an op none runs nor leaves.

Triton decides at import whether its own library runs interpreted, so every check
runs in a fresh process started with TRITON_INTERPRET=1."""

import contextlib
import functools
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from tests.calls import number, resolve
from tests.gpu.layouts import BY_NAME, values
from tests.tolerances import tolerance

F = torch.nn.functional
ROOT = pathlib.Path(__file__).parents[2]


def interpreted(test, *ops):
    """Run `test` in a fresh interpreter-mode process, with `make` building the kernels
    of `ops` (kernel files), each of them at least once and no other."""

    def run(tmp_path):
        _run_interpreted(tmp_path, f"checks.{test.__name__}", ops)

    run.__name__ = test.__name__
    run.runs_ops = ops
    return run


def _run_interpreted(tmp_path, check, ops):
    """`check(make)` (a dotted name, `checks` being this module) in a fresh
    interpreter-mode process, building the kernels of `ops` and no other."""
    script = (
        "import pathlib, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.unit import test_interpreted as checks\n"
        "from tests.ops import makers\n"
        "import torch; torch.manual_seed(0)\n"
        f"make = checks.maker(pathlib.Path({str(tmp_path)!r}), {ops!r})\n"
        f"{check}(make)\n"
        f"assert not {ops!r} or make.made == set({ops!r}), sorted(set({ops!r}) - make.made)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1", HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def _beside_their_ops():
    """The composite ops whose interpreted check is in their tests/ops module
    (`interpreted(make)`), by op."""
    from tests.ops import makers

    return {op: module for op, module in makers().items() if hasattr(module, "interpreted")}


def _their_kernels(op, module):
    """The kernel files an op's interpreted check runs: its own, and those its wrapper
    launches besides (the module's INTERPRETED_OPS: max's whole-tensor value is the
    sums kernel's)."""
    return tuple(getattr(module, "INTERPRETED_OPS", (op,)))


@pytest.mark.parametrize("op", sorted(_beside_their_ops()))
def test_checks_beside_their_ops(tmp_path, op):
    ops = _their_kernels(op, _beside_their_ops()[op])
    _run_interpreted(tmp_path, f"makers()[{op!r}].interpreted", ops)


def covered():
    """The ops (kernel files) the tests here run, by test."""
    tests = [(name, test) for name, test in globals().items() if hasattr(test, "runs_ops")]
    found = {name: test.runs_ops for name, test in tests}
    found.update(
        {
            f"test_checks_beside_their_ops[{op}]": _their_kernels(op, module)
            for op, module in _beside_their_ops().items()
        }
    )
    return found


def maker(build_dir, allowed=None):
    from ntops_aot.aot.declare import registry as ops
    from ntops_aot.aot.toolchain.compilers import Toolchain
    from ntops_aot.aot.toolchain.targets import TARGETS

    toolchain = Toolchain(build_dir)
    registry = ops.load_all(toolchain)
    import inspect

    import ninetoothed
    import triton.runtime.interpreter

    def make(op, ndim, dtype="fp32", workspace=1, **options):
        if allowed and op not in allowed:
            raise AssertionError(f"{op}: name it among the ops of this check's interpreted(...)")
        make.made.add(op)
        arrangement, application, tensors = registry[op].module.premake(ndim, dtype, **options)
        with toolchain.target(TARGETS["sm_90"]):
            kernel = ninetoothed.make(arrangement, application, tensors)
        # ninetoothed copies the Triton functions an application calls into the
        # generated module only when they are JITFunctions; the interpreter makes them
        # InterpretedFunctions, so hand them over as the compiled module would have them.
        helpers = {
            name: value
            for name, value in vars(inspect.getmodule(application)).items()
            if isinstance(value, triton.runtime.interpreter.InterpretedFunction)
        }
        kernel._launch.__globals__.update(helpers)
        _keep_constexprs(kernel._kernel)
        # Constexpr tensors (a configuration's choices) are passed last, by value; what
        # the launcher gives (a workspace for split configurations, the launch's id)
        # as `workspace` int32 words (a small dummy unless a check splits) and a 1.
        constants = [tensor.value for tensor in tensors if tensor.constexpr]
        names = application.__code__.co_varnames[: application.__code__.co_argcount]
        space = registry[op].module.SPACE
        words = torch.zeros(workspace, dtype=torch.int32)
        given = {space.workspace: words, space.launch_id: 1}
        given = {names.index(name): value for name, value in given.items() if name}

        def call(*args):
            args = list(args)
            for at in sorted(given):
                args.insert(at, given[at])
            with numpy_libdevice():
                return kernel(*args, *constants)

        return call

    make.made = set()
    make.registry = registry
    return make


# libdevice's functions as numpy's (or torch's, on the CPU), by libdevice's name.
_STAND_INS = {
    "log1p": "log1p", "expm1": "expm1", "sin": "sin", "cos": "cos", "tanh": "tanh",
    "sqrt_rn": "sqrt", "div_rn": "true_divide", "fmod": "fmod", "pow": "power",
    "floor": "floor", "trunc": "trunc", "copysign": "copysign", "erf": "torch.special.erf",
    "atan": "arctan", "acosh": "arccosh", "cosh": "cosh", "nearbyint": "rint",
}  # fmt: skip


@contextlib.contextmanager
def numpy_libdevice():
    """libdevice's functions (which return nothing under Triton's interpreter) as
    numpy's or torch's, while a kernel runs: set only then, since ninetoothed would
    inline Python functions found there into the kernels it generates (it leaves
    libdevice's own calls alone)."""
    import numpy as np
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime.interpreter import TensorHandle

    def stand_in(name):
        if name.startswith("torch."):
            function = functools.reduce(getattr, name.split(".")[1:], torch)
            return lambda *arrays: function(*map(torch.from_numpy, arrays)).numpy()
        return getattr(np, name)

    def wrapped(function):
        def run(*xs):
            # The widest tensor argument gives the result's type; numbers come as its dtype.
            like = max((x for x in xs if hasattr(x, "handle")), key=lambda x: x.handle.data.size)
            dtype = like.handle.data.dtype
            arrays = [x.handle.data if hasattr(x, "handle") else dtype.type(x) for x in xs]
            result = np.asarray(function(*arrays)).astype(dtype)
            return tl.tensor(TensorHandle(result, like.dtype.scalar), like.type)

        return run

    saved = {name: getattr(libdevice, name) for name in _STAND_INS if hasattr(libdevice, name)}
    for name in saved:
        setattr(libdevice, name, wrapped(stand_in(_STAND_INS[name])))
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(libdevice, name, function)


def _keep_constexprs(interpreted):
    """Triton's interpreter takes a parameter as constexpr only when its annotation
    reads `constexpr` or `tl.constexpr`; ninetoothed writes `triton.language.constexpr`,
    so the interpreter would turn them into tensors. Name them for it."""
    import ninetoothed.naming
    from triton.runtime.interpreter import GridExecutor

    names = [name for name in interpreted.arg_names if ninetoothed.naming.is_constexpr(name)]

    def run(*args, grid, warmup, **kwargs):
        if warmup:
            return None
        executor = GridExecutor(
            interpreted.rewrite(), interpreted.arg_names, grid, interpreted.pre_run_hooks
        )
        executor.constexprs = names
        return executor(*args, **kwargs)

    interpreted.run = run


def check_element_wise(make):
    x, y = torch.randn(7, 129), torch.randn(7, 129)
    out = torch.empty_like(x)
    make("add", 2)(x, y, 0.5, out)
    torch.testing.assert_close(out, x + 0.5 * y)
    make("sub", 2, other="scalar")(x, 1.5, 2.0, out)
    torch.testing.assert_close(out, x - 3.0)
    make("mul", 1)(x.flatten(), y.flatten(), out.view(-1))
    torch.testing.assert_close(out, x * y)
    make("silu_mul", 2)(x, y, out)
    torch.testing.assert_close(out, F.silu(x) * y)
    for op, reference in [
        ("abs", torch.abs),
        ("neg", torch.neg),
        ("exp", torch.exp),
        ("sigmoid", torch.sigmoid),
        ("relu", torch.relu),
        ("silu", F.silu),
        ("rsqrt", torch.rsqrt),
    ]:
        positive = x.abs() + 0.1
        make(op, 2)(positive, out)
        torch.testing.assert_close(out, reference(positive), msg=op)
    with_nan = x.clone()
    with_nan[0, 0] = float("nan")
    for low, high in ((-0.5, 0.25), (0.5, -0.25), (float("nan"), 0.25), (-0.5, float("nan"))):
        make("clamp", 2)(with_nan, low, high, out)
        torch.testing.assert_close(out, with_nan.clamp(low, high), equal_nan=True)
    low, high = torch.randn(7, 129) - 0.5, torch.randn(7, 129) + 0.5
    low[1, :5], high[2, :5] = float("nan"), float("nan")
    high[3] = low[3] - 1  # min > max: max
    for kinds, bounds, reference in [
        (("tensor", "tensor"), (low, high), (low, high)),
        (("tensor", "scalar"), (low, 0.25), (low, torch.tensor(0.25))),
        (("scalar", "tensor"), (-0.25, high), (torch.tensor(-0.25), high)),
        (("tensor", "scalar"), (low, float("inf")), (low, None)),
        (("scalar", "tensor"), (float("nan"), high), (torch.tensor(float("nan")), high)),
    ]:
        make("clamp", 2, min=kinds[0], max=kinds[1])(with_nan, *bounds, out)
        expected = torch.clamp(with_nan, *reference)
        torch.testing.assert_close(out, expected, equal_nan=True, msg=str(kinds))


def _with_special_values(shape, dtype=torch.float32):
    """Normal values of `shape` in a 4-dim kernel's layout (the runtime pads 3-dim
    calls to 4), their first elements NaN, +-inf, +-0 and numbers near the ops'
    branch points."""
    x = torch.randn(shape) * 4
    special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 3.0, -3.0, 1e-6, -1e-6, 25.0]
    x.view(-1)[: len(special)] = torch.tensor(special)
    return x.to(dtype)[None]


def check_activations(make):
    """leaky_relu, hardswish, softplus and elu against torch, computed as torch's CUDA
    kernels compute them (in fp32 for half types, rounded once): every parameter's
    path, special values, a non-contiguous view and fp16/bf16."""
    cases = [
        ("leaky_relu", (0.01,), lambda x: F.leaky_relu(x)),
        ("leaky_relu", (2.5,), lambda x: F.leaky_relu(x, 2.5)),  # a slope above 1
        ("leaky_relu", (-0.3,), lambda x: F.leaky_relu(x, -0.3)),
        ("hardswish", (), F.hardswish),
        ("softplus", (1.0, 20.0), F.softplus),
        ("softplus", (2.0, 5.0), lambda x: F.softplus(x, 2.0, 5.0)),  # x * 2 > 5: x itself
        ("softplus", (-1.5, 20.0), lambda x: F.softplus(x, -1.5)),
        ("elu", (1.0,), F.elu),
        ("elu", (0.5,), lambda x: F.elu(x, 0.5)),
    ]
    x = _with_special_values((6, 42, 123))
    out = torch.empty_like(x)
    for op, scalars, reference in cases:
        make(op, 4)(x, *scalars, out)
        expected = reference(x)
        torch.testing.assert_close(out, expected, equal_nan=True, msg=f"{op}{scalars}")
        same = ~expected.isnan()  # signed zeros as torch's: leaky_relu(-0.0, -0.3) is +0.0
        assert torch.equal(out[same].signbit(), expected[same].signbit()), f"{op}{scalars}"
    # Non-contiguous (a transposed view) and half types, against torch's fp32 result
    # rounded once.
    for dtype in (torch.float16, torch.bfloat16):
        view = _with_special_values((123, 42), dtype)[0].t()
        result = torch.empty(123, 42, dtype=dtype).t()
        for op, scalars, reference in cases:
            make(op, 2, "fp16" if dtype == torch.float16 else "bf16")(view, *scalars, result)
            expected = reference(view.float()).to(dtype)
            torch.testing.assert_close(result, expected, equal_nan=True, msg=f"{op} {dtype}")
    check_small_results(make)


def check_small_results(make):
    """Where libdevice's log1p and expm1 matter: softplus far below 0 (log(1 + e^x)
    rounds to 0 there) and elu near 0 (e^x - 1 loses its digits), relative to the
    result (an absolute tolerance would pass the naive formulas)."""
    x = -torch.linspace(15.0, 40.0, 257)
    out = torch.empty_like(x)
    make("softplus", 1)(x, 1.0, 20.0, out)
    torch.testing.assert_close(out, F.softplus(x), rtol=1.3e-6, atol=0)
    small = -torch.logspace(-8, -2, 257)
    make("elu", 1)(small, 1.0, out)
    torch.testing.assert_close(out, F.elu(small), rtol=1.3e-6, atol=0)


def check_embedding(make):
    """Rows of a weight at int64 and int32 indices of a (6, 7) index tensor, passed as
    the runtime passes them (flattened, the output as (42, dim)), and at a strided 1-D
    index view; blocks smaller than the weight's 37 columns, so that tiles end inside a
    row; fp32, fp16 and bf16 weights. The weight is a view into a buffer of NaN, so
    a read outside it shows: out-of-range indices must come out as rows of zeros."""
    small = {"block_size_m": 4, "block_size_n": 16}
    for weight_dtype, name in (
        (torch.float32, "fp32"),
        (torch.float16, "fp16"),
        (torch.bfloat16, "bf16"),
    ):
        buffer = torch.full((70, 48), math.nan, dtype=weight_dtype)
        weight = buffer[10:60, 5:42]  # (50, 37), rows 48 apart
        weight.copy_(torch.randn(50, 37))
        for index_dtype, index in ((torch.int64, "i64"), (torch.int32, "i32")):
            kernel = make("embedding", 1, name, index=index, **small)
            indices = torch.randint(0, 50, (6, 7), dtype=index_dtype)
            indices[0, :2] = torch.tensor([0, 49])  # the first and last rows
            out = torch.empty(6, 7, 37, dtype=weight_dtype)
            kernel(indices.flatten(), weight, out.view(42, 37))
            assert torch.equal(out, F.embedding(indices, weight)), (name, index)
            column = indices[:, 3]  # stride 7
            out = torch.empty(6, 37, dtype=weight_dtype)
            kernel(column, weight, out)
            assert torch.equal(out, F.embedding(column, weight)), (name, index)
            bad = torch.tensor([3, -1, 50, 2**31 - 1, -(2**31), 7], dtype=index_dtype)
            out = torch.full((6, 37), 5.0, dtype=weight_dtype)
            kernel(bad, weight, out)
            valid = torch.tensor([True, False, False, False, False, True])
            assert torch.equal(out[valid], weight[bad[valid]]), (name, index)
            assert torch.equal(out[~valid], torch.zeros(4, 37, dtype=weight_dtype)), (name, index)


def check_comparisons_and_bitwise(make):
    x = torch.randint(-5, 5, (300,), dtype=torch.int32)
    y = torch.randint(-5, 5, (300,), dtype=torch.int32)
    result = torch.empty(300, dtype=torch.bool)
    halves = torch.tensor([0.5, -1.0, float("nan"), 2.0, -0.0, float("inf")] * 50)
    for code, op in enumerate(("eq", "ne", "lt", "le", "gt", "ge")):
        reference = getattr(torch, op)
        make("comparison", 1, "i32")(x, y, code, result)
        assert torch.equal(result, reference(x, y)), op
        make("comparison", 1, "i32", other="scalar")(x, 3, code, result)
        assert torch.equal(result, reference(x, 3)), op
        other = halves.roll(1)
        make("comparison", 1, "fp32")(halves, other, code, result)
        assert torch.equal(result, reference(halves, other)), op  # NaN: only ne holds
    ints = torch.empty_like(x)
    make("bitwise", 1, "i32")(x, y, 0, ints)
    assert torch.equal(ints, x & y)
    make("bitwise", 1, "i32", other="scalar")(x, 6, 1, ints)
    assert torch.equal(ints, x | 6)
    flags = x > 0
    make("bitwise_not", 1, "i1")(flags, result)
    assert torch.equal(result, ~flags)
    special = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    make("isinf", 1)(special, result[:4])
    assert torch.equal(result[:4], torch.isinf(special))
    make("isnan", 1)(special, result[:4])
    assert torch.equal(result[:4], torch.isnan(special))


def check_rows(make):
    x = torch.randn(5, 3000)
    weight, bias = torch.randn(3000), torch.randn(3000)
    out = torch.empty_like(x)
    make("rms_norm", 2)(x, weight, 1e-6, 0, out)
    torch.testing.assert_close(out, F.rms_norm(x, (3000,), weight, 1e-6))
    make("layer_norm", 2)(x, weight, bias, 1e-5, out)
    torch.testing.assert_close(out, F.layer_norm(x, (3000,), weight, bias, 1e-5))
    make("layer_norm", 2, weight="none")(x, bias, 1e-5, out)
    torch.testing.assert_close(out, F.layer_norm(x, (3000,), None, bias, 1e-5))
    # A constant row normalizes to exactly 0, as in torch's Welford kernel: the
    # rounded mean of these rows is off by an ulp, which eps 1e-12 made ~1e-2.
    constant = torch.tensor([1.1, 0.123456789, -2.71828, 1000.1, 5.0])[:, None].expand(5, 3000)
    make("layer_norm", 2, weight="none", bias="none")(constant, 1e-12, out)
    assert torch.equal(out, torch.zeros_like(out))
    # A row holding an infinity: torch's vectorized kernel gives 0 for its finite
    # elements, its Welford kernel NaN for all of them; `welford` picks. Other rows
    # are the same either way.
    x[1, 17] = -math.inf
    finite = [0, 2, 3, 4]
    for welford in (0, 1):
        make("rms_norm", 2)(x, weight, 1e-6, welford, out)
        assert out[1].isnan().all() if welford else out[1].isnan().sum() == 1
        torch.testing.assert_close(out[finite], F.rms_norm(x[finite], (3000,), weight, 1e-6))


def check_softmax_rows(make):
    """softmax and log_softmax: rows of 3000 (three 1024-element tiles, the last
    partial) and of 37, fp64 in fp64, fp16 rounded once from fp32; rows with -inf:
    a first tile of -inf only (a left-padded row), -inf throughout (NaN, as in
    torch), +inf (NaN)."""
    x = torch.randn(6, 3000) * 5
    x[1, :1500] = -math.inf
    x[2, 2500:] = -math.inf
    x[3] = -math.inf
    x[4, 7] = math.inf
    # fp64: softmax relative to its results; log_softmax's results near 0 are
    # differences of numbers up to ~200 here (x - max - log(sum)), whose ulp is 3e-14.
    fp64_atol = {"softmax": 1e-300, "log_softmax": 1e-13}
    for op, reference in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        out = torch.empty_like(x)
        make(op, 2)(x, out)
        torch.testing.assert_close(out, reference(x, -1), equal_nan=True, msg=op)
        narrow = torch.randn(4, 6, 37)
        out = torch.empty_like(narrow)
        make(op, 3)(narrow, out)
        torch.testing.assert_close(out, reference(narrow, -1), msg=op)
        wide = torch.randn(5, 3000, dtype=torch.float64) * 30
        out64 = torch.empty_like(wide)
        make(op, 2, "fp64")(wide, out64)
        expected = reference(wide, -1)
        torch.testing.assert_close(out64, expected, rtol=1e-13, atol=fp64_atol[op], msg=op)
        half = torch.randn(5, 3000, dtype=torch.float16)
        out16 = torch.empty_like(half)
        make(op, 2, "fp16")(half, out16)
        torch.testing.assert_close(out16, reference(half.float(), -1).half(), msg=op)


def check_matrix_products(make):
    small = {"block_size_m": 16, "block_size_n": 16, "block_size_k": 16}
    a, b = torch.randn(37, 23), torch.randn(23, 29)
    out = torch.empty(37, 29)
    make("mm", 2, fp32_precision="ieee", **small)(a, b, out)
    torch.testing.assert_close(out, a @ b)
    batch = torch.empty(3, 37, 29)
    make("bmm", 3, fp32_precision="ieee", **small)(a.expand(3, 37, 23), b.expand(3, 23, 29), batch)
    torch.testing.assert_close(batch, (a @ b).expand(3, 37, 29))
    bias = torch.randn(29)
    make("addmm", 2, fp32_precision="ieee", **small)(bias.expand(37, 29), a, b, 0.5, 2.0, out)
    torch.testing.assert_close(out, torch.addmm(bias, a, b, beta=0.5, alpha=2.0))


def check_matrix_products_through_tma(make):
    """The aligned specialisations' path: TMA descriptors over row-major activations
    and weights in nn.Linear's layout or row-major, one row (decode) included, with
    the zero stride the launcher gives a dim of size 1."""
    from ntops_aot.aot.declare.space import Spec

    small = {"block_size_m": 16, "block_size_n": 16, "block_size_k": 16, "tma": True}
    half = torch.float16
    linear, row_major = Spec(32, (1, 0, 1), aligned=True), Spec(32, (1, 1, 1), aligned=True)
    w = torch.randn(80, 64, dtype=half)  # (out, in)
    for rows in (48, 1):
        x = torch.randn(rows, 64, dtype=half)
        if rows == 1:
            x = x.as_strided((1, 64), (0, 1))
        out = torch.empty(rows, 80, dtype=half)
        make("mm", 2, "fp16", spec=linear, **small)(x, w.t(), out)
        torch.testing.assert_close(out, (x.float() @ w.float().t()).half(), rtol=1e-2, atol=1e-2)
        make("mm", 2, "fp16", spec=row_major, **small)(x, w.t().contiguous(), out)
        torch.testing.assert_close(out, (x.float() @ w.float().t()).half(), rtol=1e-2, atol=1e-2)
    x, bias = torch.randn(48, 64, dtype=half), torch.randn(80, dtype=half)
    out = torch.empty(48, 80, dtype=half)
    addmm_spec = Spec(32, (None, 1, 0, 1), aligned=True)
    make("addmm", 2, "fp16", spec=addmm_spec, **small)(bias.expand(48, 80), x, w.t(), 0.5, 2.0, out)
    expected = torch.addmm(bias.float(), x.float(), w.float().t(), beta=0.5, alpha=2.0)
    torch.testing.assert_close(out, expected.half(), rtol=1e-2, atol=2e-2)
    check_split_k()
    xs, ws = torch.randn(3, 48, 64, dtype=half), torch.randn(3, 80, 64, dtype=half)
    batch = torch.empty(3, 48, 80, dtype=half)
    make("bmm", 3, "fp16", spec=Spec(32, (2, 1, 2), aligned=True), **small)(xs, ws.mT, batch)
    torch.testing.assert_close(batch, (xs.float() @ ws.float().mT).half(), rtol=1e-2, atol=1e-2)


def check_split_k():
    """Split K (grid = tiles x parts): each part's partial sum in the workspace, the
    last part of a tile to arrive adds them up. The workspace comes as the launcher
    gives it, unzeroed (an int64 counter per program, then a tile of fp32 per
    program); a replayed graph launches again with the same launch id."""
    import triton
    import triton.language as tl

    global product  # the interpreter resolves a kernel's names in its module's globals
    from ntops_aot.kernels._lib.products import product

    @triton.jit
    def split(
        a, b, c, workspace, launch, M, N, K,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ):  # fmt: skip
        product(
            a, 1, M, K, 0, K, 1, b, N, 0, N, 1, c, 0, N, 1, c, 0, 0, 0, 0.0, 1.0, workspace,
            launch, BM, BN, BK, 8, False, False, False, False, False, "ieee", True, False, False,
        )  # fmt: skip

    def tag(launch):  # _lib/parts.py's, on the wrapping 64-bit integers
        return ((launch * 6364136223846793005 + 2**63) % 2**64 - 2**63) & -64

    a, b = torch.randn(37, 200), torch.randn(200, 29)
    tiles = 3 * 2
    for parts in (1, 3, 5):
        programs = tiles * parts
        # Garbage, as recycled memory holds: noise, counts another launch (5) left, and
        # small integers of the form 64 x 7 + k, which passed for counts of launch 7
        # when its tag was its id times 64.
        workspace = torch.randint(-(2**31), 2**31 - 1, (programs * 258 + 32,), dtype=torch.int32)
        counters = workspace.view(torch.int64)
        counters[: tiles // 2] = tag(5) + 2
        counters[tiles // 2 : tiles] = 7 * 64 + 1
        for launch in (7, 7, 8):  # 7 twice: a graph replay
            c = torch.full((37, 29), float("nan"))
            split[(programs,)](a, b, c, workspace, launch, 37, 29, 200, 16, 16, 16)
            # Parts sum in another order than torch: fp32 rounding apart, equal.
            torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-4, msg=f"{parts} parts")
        if parts > 1:  # every counter cleared by its tile's last part
            assert workspace.view(torch.int64)[:tiles].tolist() == [0] * tiles


def check_attention(make):
    """Unsplit (prefill's configuration): rows of a block from two query heads, key
    lengths no block divides, every mask, with and without new KV-cache entries; then
    split keys (decode's) directly."""
    for mask in ("none", "causal", "bool", "float"):  # none: causal past the last key
        for seq_q, seq_kv, appended in ((37, 53, 0), (37, 53, 37), (3, 40, 3), (1, 1, 1)):
            attention_with(make, mask, seq_q, seq_kv, appended)
    check_split_attention()


def _appended(k, v, appended):
    """The last `appended` keys and values as new entries (in the layout a fused QKV
    projection's view has), and caches whose slots for them hold NaN: read before the
    kernel writes them, they would poison the result."""
    if not appended:
        return k, v, k, v
    batch, heads, _, head_dim = k.shape

    def entries(cache):
        fresh = torch.empty(batch, appended, heads, head_dim, dtype=cache.dtype)
        fresh = fresh.transpose(1, 2)
        fresh.copy_(cache[:, :, -appended:])
        return fresh

    def poisoned(cache):
        cache = cache.clone()
        cache[:, :, -appended:] = float("nan")
        return cache

    return poisoned(k), poisoned(v), entries(k), entries(v)


def _attention_case(mask, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, dtype=torch.float32):
    """Random inputs in the layouts models pass (query a transposed view), the mask
    argument as the kernel takes it and torch's result."""
    q = torch.randn(batch, seq_q, heads_q, head_dim, dtype=dtype).transpose(1, 2)
    k, v = (torch.randn(batch, heads_kv, seq_kv, head_dim, dtype=dtype) for _ in range(2))
    kr, vr = (t.repeat_interleave(heads_q // heads_kv, 1) for t in (k, v))
    extra, reference_mask = (), None
    if mask == "causal":
        from torch.nn.attention.bias import causal_lower_right

        extra, reference_mask = (seq_kv - seq_q,), causal_lower_right(seq_q, seq_kv)
    elif mask in ("bool", "float"):
        reference_mask = torch.rand(batch, 1, seq_q, seq_kv) > 0.3
        reference_mask[..., 0] = True
        if mask == "float":
            reference_mask = torch.randn(1, heads_q, 1, seq_kv)
        extra = (reference_mask.expand(batch, heads_q, seq_q, seq_kv),)
    expected = F.scaled_dot_product_attention(q, kr, vr, reference_mask)
    return q, k, v, extra, expected


def attention_with(make, mask, seq_q, seq_kv, appended):
    batch, heads_q, heads_kv, head_dim = 2, 4, 2, 64
    q, k, v, extra, expected = _attention_case(mask, batch, heads_q, heads_kv, seq_q, seq_kv, 64)
    cache_k, cache_v, new_k, new_v = _appended(k, v, appended)
    kernel = make(
        "scaled_dot_product_attention", 4, head_dim="64", mask="causal" if mask == "none" else mask,
        block_size_m=16, block_size_n=16, block_size_d=64,
    )  # fmt: skip
    if mask == "none":  # as the runtime calls it: the diagonal past the last key
        extra = (seq_kv,)
    out = torch.empty(batch, heads_q, seq_q, head_dim)
    rows = out.view(batch, heads_kv, heads_q // heads_kv * seq_q, head_dim)
    scale = 1 / math.sqrt(head_dim)
    present = (new_k, new_v, appended)
    if mask in ("none", "causal"):
        kernel(rows, q, cache_k, cache_v, *present, scale, *extra)
    else:
        kernel(rows, q, cache_k, cache_v, *present, *extra, scale)
    case = f"{mask} {seq_q}x{seq_kv} +{appended}"
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4, msg=case)
    assert torch.equal(cache_k, k), case  # the entries written
    assert torch.equal(cache_v, v), case


def check_split_attention():
    """Split keys (flash decoding, grid = blocks of rows x parts): each part's maximum,
    sum and accumulator in the workspace, the last part of a block to arrive merges
    them. Parts past the keys (more parts than key blocks, a causal part after the
    diagonal) hold nothing; head_dim 96 pads to 128; the workspace comes unzeroed,
    with another launch's counts in it, and a graph replays a launch id."""
    import triton
    import triton.language as tl

    global attend  # the interpreter resolves a kernel's names in its module's globals
    from ntops_aot.kernels._lib.attention import attend

    @triton.jit
    def split(
        q, k, v, o, pk, pv, bias, workspace, launch, scale, offset,
        batch, heads_kv, seq_q, seq_kv, appended, rows_total, head_dim,
        sq_b, sq_h, sq_s, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sp_b, sp_h, sp_s,
        so_b, so_h, so_r, sb_b, sb_h, sb_s, sb_k,
        BLOCK_D: tl.constexpr, MASK: tl.constexpr, MAX_PARTS: tl.constexpr,
    ):  # fmt: skip
        attend(
            q, k, v, o, pk, pv, bias, workspace, launch, scale, offset,
            batch, heads_kv, seq_q, seq_kv, appended, rows_total, head_dim,
            sq_b, sq_h, sq_s, 1, sk_b, sk_h, sk_s, 1, sv_b, sv_h, sv_s, 1, sp_b, sp_h, sp_s, 1,
            so_b, so_h, so_r, 1, sb_b, sb_h, sb_s, sb_k, 16, 16, BLOCK_D, MASK, MAX_PARTS,
            "ieee", False,
        )  # fmt: skip

    kinds = {"none": 1, "causal": 1, "bool": 2, "float": 3}  # none: causal past the keys
    for mask, seq_q, seq_kv, head_dim, parts, appended in [
        ("none", 1, 100, 64, 3, 1),
        ("none", 1, 20, 64, 5, 0),  # more parts than key blocks
        ("causal", 4, 70, 96, 4, 4),  # the last part past every query's diagonal
        ("bool", 2, 45, 64, 2, 0),
        ("bool", 6, 45, 96, 3, 2),  # 12 rows: merged 8 and then 4 at a time
        ("float", 1, 1, 64, 3, 1),
        ("none", 16, 50, 64, 2, 40),  # more new entries than a block: shared by programs
        ("causal", 2, 590, 64, 37, 0),  # 37 parts: merged in two rounds, of 32 and of 5
    ]:
        batch, heads_q, heads_kv = 2, 4, 2
        q, k, v, extra, expected = _attention_case(
            mask, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim
        )
        cache_k, cache_v, new_k, new_v = _appended(k, v, appended)
        out = torch.full((batch, heads_q, seq_q, head_dim), float("nan"))
        rows_total = heads_q // heads_kv * seq_q
        rows = out.view(batch, heads_kv, rows_total, head_dim)
        tiles = batch * heads_kv * -(-rows_total // 16)
        programs = tiles * parts
        block_d = triton.next_power_of_2(head_dim)
        words = programs * (2 + 16 * (2 + block_d)) + 32 * (programs // 16 + 1)
        workspace = torch.randint(-(2**31), 2**31 - 1, (words,), dtype=torch.int32)
        workspace.view(torch.int64)[: tiles // 2] = 5 * 64 + 1  # another launch's count
        bias = extra[0] if mask in ("bool", "float") else out
        bias_strides = bias.stride() if mask in ("bool", "float") else (0, 0, 0, 0)
        offset = extra[0] if mask == "causal" else seq_kv
        for launch in (7, 7, 8):  # 7 twice: a graph replay
            out.fill_(float("nan"))
            split[(programs,)](
                q, cache_k, cache_v, rows, new_k, new_v, bias, workspace, launch,
                1 / math.sqrt(head_dim), offset, batch, heads_kv, seq_q, seq_kv, appended,
                rows_total, head_dim, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
                *new_k.stride()[:3], *rows.stride()[:3], *bias_strides, block_d, kinds[mask],
                8 if parts <= 8 else 64,
            )  # fmt: skip
            case = f"{mask} {seq_q}x{seq_kv} +{appended} {parts} parts"
            torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4, msg=case)
            assert torch.equal(cache_k, k), case
            assert torch.equal(cache_v, v), case


def check_rotary_position_embedding(make):
    for interleaved in (True, False):
        rotary_with(make, interleaved)


def rotary_with(make, interleaved):
    batch, seq, heads, head_dim = 2, 5, 3, 8
    half = head_dim // 2
    x = torch.randn(batch, seq, heads, head_dim)
    sin, cos = torch.randn(seq, half), torch.randn(seq, half)

    def pairs(t):
        return (
            t.unflatten(-1, (half, 2))
            if interleaved
            else t.unflatten(-1, (2, half)).transpose(-1, -2)
        )

    def table(t):
        return t[None, :, None, :, None].expand(batch, seq, heads, half, 2)

    out = torch.empty_like(x)
    make("rotary_position_embedding", 5)(pairs(x), table(sin), table(cos), pairs(out))
    x0, x1 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :half], x[..., half:])
    s, c = sin[None, :, None, :], cos[None, :, None, :]
    o0, o1 = x0 * c - x1 * s, x0 * s + x1 * c
    expected = torch.stack((o0, o1), -1).flatten(-2) if interleaved else torch.cat((o0, o1), -1)
    torch.testing.assert_close(out, expected)


def check_ordinary_ops(make):
    """Every ordinary op's kernel (its function rendered from its declaration) but those
    left to the GPU, as its declaration describes it: in fp32 (or its first dtype),
    every switch value, tensors where it takes tensors, a number where a switch says
    so, its samples' values for its other parameters; compared with its reference.
    A kernel file added to kernels/ is checked here with no test written for it."""
    from ntops_aot.aot.declare.space import DTYPES

    for name, definition in make.registry.items():
        if name in LEFT_TO_THE_GPU:
            continue
        for api in definition.apis():
            if api["wrapper"] is not None or api["op"] != name:
                continue
            dtypes = definition.space.dtypes
            short = "fp32" if "fp32" in dtypes else dtypes[0]
            for switches in definition.space.switch_choices(short):
                kernel = make(name, 2, DTYPES[short].triton, **dict(switches))
                got, expected = _declared_call(kernel, api, dict(switches), BY_NAME[short])
                case = f"{name} {short} {dict(switches)}"
                if expected.dtype.is_floating_point:
                    within = tolerance(expected.dtype, api["tolerance"])
                    torch.testing.assert_close(got, expected, equal_nan=True, msg=case, **within)
                else:
                    assert torch.equal(got, expected), case


def _declared_call(kernel, api, switches, dtype):
    """`kernel` called as the runtime calls it for `api` (its `kernel` parameters, then
    the output) and its reference on the same arguments: (result, expected)."""
    domain = next((sample["domain"] for sample in api["samples"] if sample["domain"]), None)
    types = {param["name"]: param["type"] for param in api["params"]}
    arguments = {}
    for name in api["kernel"]:
        if name in api["bound"]:  # a constant the function passes
            arguments[name] = api["bound"][name]
        elif types[name] == "Tensor" or switches.get(name) == "tensor":
            arguments[name] = values((7, 129), dtype, domain, device="cpu")
        elif name in switches:  # a number operand
            arguments[name] = number(True if dtype == torch.bool else 1.5, dtype)
        else:
            given = [
                sample["values"][name] for sample in api["samples"] if name in sample["values"]
            ]
            default = next(p.get("default") for p in api["params"] if p["name"] == name)
            arguments[name] = given[0] if given else default
    named = {name: value for name, value in arguments.items() if name not in api["bound"]}
    for switch, pick in api["switches"].items():
        if pick["rule"] == "value":
            value = switches[switch]
            named[switch] = None if types[switch] == "str?" and value == "none" else value
    first = api["kernel"][0]
    reference = resolve(api["reference"])
    expected = reference(named.pop(first), **named)
    out = torch.empty_like(expected)
    kernel(*arguments.values(), out)
    return out, expected


def check_dropout_statistics(make):
    x = torch.ones(50000)
    out = torch.empty_like(x)
    kernel = make("dropout", 1)
    kernel(x, 1234, 0, 0.3, 1 / 0.7, out)
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.02
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.7))
    again = torch.empty_like(x)
    kernel(x, 1234, 0, 0.3, 1 / 0.7, again)
    assert torch.equal(out, again)  # the same seed and offset: the same mask
    kernel(x, 1234, 50000, 0.3, 1 / 0.7, again)
    assert not torch.equal(out, again)  # the next offset: another mask


test_element_wise = interpreted(
    check_element_wise,
    *("add", "sub", "mul", "silu_mul", "abs", "neg", "exp", "sigmoid", "relu", "silu", "rsqrt"),
    "clamp",
)
test_activations = interpreted(check_activations, "leaky_relu", "hardswish", "softplus", "elu")
test_embedding = interpreted(check_embedding, "embedding")
test_comparisons_and_bitwise = interpreted(
    check_comparisons_and_bitwise,
    *("comparison", "bitwise", "bitwise_not", "isinf", "isnan"),
)
test_rows = interpreted(check_rows, "rms_norm", "layer_norm")
test_softmax_rows = interpreted(check_softmax_rows, "softmax", "log_softmax")
test_matrix_products = interpreted(check_matrix_products, "mm", "bmm", "addmm")
test_matrix_products_through_tma = interpreted(
    check_matrix_products_through_tma, "mm", "bmm", "addmm"
)
test_attention = interpreted(check_attention, "scaled_dot_product_attention")
test_rotary_position_embedding = interpreted(
    check_rotary_position_embedding, "rotary_position_embedding"
)
test_dropout_statistics = interpreted(check_dropout_statistics, "dropout")
# every ordinary op but those below, from its declaration (what it runs is the registry's)
test_ordinary_ops = interpreted(check_ordinary_ops)

# The ops whose kernels Triton's interpreter cannot run (see the module's doc): their
# math is the GPU suite's alone.
LEFT_TO_THE_GPU = {
    "div": "Triton's interpreter cannot `|` a number's comparison with a block's (unflushing)",
}
