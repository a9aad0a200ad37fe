"""One fuzz case run and judged: torch's reference and the module under test called on
fresh copies of the same inputs, then compared (tests/gpu/fuzz.py runs many)."""

import contextlib
import dataclasses
import inspect
import re
import warnings

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor

from tests.gpu.fuzz_inputs import materialize
from tests.gpu.fuzz_ops import SPECS
from tests.subclasses import Wrapper
from tests.tolerances import bounds

MATCH, MISMATCH, BOTH_RAISE, REFUSED, CRASH, ERROR = (
    "match", "mismatch", "both-raise", "refused", "crash", "error",
)  # fmt: skip
OUTCOMES = (MATCH, MISMATCH, BOTH_RAISE, REFUSED, CRASH, ERROR)
FAILURES = (MISMATCH, CRASH, ERROR)
# What a refusal may raise; anything else (KeyError, AttributeError, ...) is a bug.
REFUSALS = (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError)


@dataclasses.dataclass(frozen=True)
class Result:
    """A case's outcome; `restart`: its worker must run no other case (the CUDA
    context may be lost)."""

    index: int
    op: str
    outcome: str
    detail: str = ""
    restart: bool = False


@dataclasses.dataclass(frozen=True)
class OpSpace:
    """What one op is built for: dtypes, and the most dims its kernels take after
    merging (None: unknown)."""

    dtypes: frozenset
    max_ndim: int | None = None


@dataclasses.dataclass
class Called:
    """One side's call: what it returned or raised, its tensor arguments afterwards,
    and which of them had their version counter bumped."""

    result: object
    error: Exception | None
    tensors: list
    bumped: list


def built_space(module):
    """Per op, what `module` is built for: an ntops_prebuilt wheel's manifest() (each
    op's SPACE, less the dtypes and ops its build left out), else the specs' dtypes."""
    manifest = getattr(module, "manifest", None)
    if manifest is None:
        return {op: OpSpace(frozenset(spec.dtypes)) for op, spec in SPECS.items()}
    built = manifest()
    names, only, ops = built["dtypes"], built["build"]["dtypes"], set(built["build"]["ops"])
    return {
        op: OpSpace(
            frozenset(
                getattr(torch, names[short])
                for short in info["dtypes"]
                if op in ops and (only is None or short in only)
            ),
            max(info["ndims"]),
        )
        for op, info in built["ops"].items()
    }


def run_case(case, module, device, space):
    """Call torch's reference, then `module`'s function, each on fresh copies of the
    case's inputs on `device`, and judge what came back."""
    spec = SPECS[case.op]
    try:
        with _precision(case.precision):
            theirs = _call(spec.reference, case, device, resolved=True)
            ours = _call(getattr(module, case.op), case, device)
            outcome, detail = _judge(case, spec, theirs, ours, device, space)
    except Exception as error:  # a comparison failed: on a lost CUDA context, or a bug here
        if is_cuda_error(error):
            return Result(case.index, case.op, CRASH, f"a CUDA error: {_text(error)}", True)
        return Result(case.index, case.op, ERROR, f"the harness failed: {_text(error)}")
    return Result(case.index, case.op, outcome, detail, outcome == CRASH)


def is_cuda_error(error):
    name = type(error).__name__
    return name in ("CudaError", "AcceleratorError") or "CUDA error" in str(error)


@contextlib.contextmanager
def _precision(precision):
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _call(function, case, device, resolved=False):
    args, kwargs = materialize(case, device, resolved)
    tensors = [value for value in _leaves((args, kwargs)) if isinstance(value, torch.Tensor)]
    before = [_version(tensor) for tensor in tensors]
    result, error = None, None
    try:
        with warnings.catch_warnings():
            # Cases pass out= tensors of the wrong shape on purpose (torch resizes them).
            warnings.filterwarnings("ignore", "An output with one or more elements was resized")
            result = function(*args, **kwargs)
    except Exception as caught:
        error = caught
    if torch.device(device).type == "cuda":
        try:
            torch.cuda.synchronize()  # this call's asynchronous errors surface here
        except Exception as caught:
            error = caught
    bumped = [_version(tensor) > version for tensor, version in zip(tensors, before, strict=True)]
    return Called(result, error, tensors, bumped)


def _leaves(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _version(tensor):
    try:
        return tensor._version
    except (RuntimeError, AttributeError):  # tensors without a version counter
        return 0


def _judge(case, spec, theirs, ours, device, space):
    for who, called in (("torch", theirs), ("ours", ours)):
        if called.error is not None and is_cuda_error(called.error):
            return CRASH, f"{who} raised a CUDA error: {_text(called.error)}"
    if theirs.error is not None and ours.error is not None:
        return BOTH_RAISE, f"torch: {_text(theirs.error)}\nours: {_text(ours.error)}"
    if theirs.error is not None:
        return MISMATCH, f"torch raised {_text(theirs.error)}; ours returned {_meta(ours.result)}"
    if ours.error is not None:
        return _refusal(case, spec, ours.error, space)
    args, kwargs = materialize(case, device)  # the inputs as they were
    check = _dropout_problems if spec.check == "dropout" else _close_problems
    problems = check(case, spec, theirs, ours, args, kwargs)
    problems += _identity_problems(theirs, ours) + _version_problems(theirs, ours)
    return (MISMATCH, "\n".join(problems)) if problems else (MATCH, "")


def _refusal(case, spec, error, space):
    """A refusal is fine where the call is outside the built space and the error is a
    clean one naming the op; anything else ours raises where torch returns is not."""
    text = _text(error)
    if not isinstance(error, REFUSALS):
        return ERROR, f"ours raised {text} (torch returned)"
    named = (case.op, *spec.names)
    if not any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", str(error)) for name in named):
        return ERROR, f"ours refused without naming {case.op}: {text}"
    reason = _outside(case, spec, error, space)
    if reason is None:
        return ERROR, f"ours refused a call inside the built space: {text}"
    return REFUSED, f"{reason}: {text}"


def _outside(case, spec, error, space):
    """Why the call is outside what the module is built for, or None."""
    if case.outside:
        return case.outside[0]
    built = space.get(spec.kernel or case.op)
    if built is None or case.dtype not in built.dtypes:
        return f"{case.dtype} is not built"
    merged = re.search(r"(\d+) dims? after merging", str(error))
    if merged and built.max_ndim is not None and int(merged.group(1)) > built.max_ndim:
        return f"{merged.group(1)} dims after merging"
    return None


def _close_problems(case, spec, theirs, ours, args, kwargs):
    want = theirs.result
    if any(isinstance(tensor, FakeTensor) for tensor in theirs.tensors):
        return differences("the result", ours.result, want, 0.0, 0.0)  # metadata only
    first = want[0] if isinstance(want, tuple) else want  # attention's output, its lse
    if spec.atol is not None and isinstance(first, torch.Tensor):
        rtol, atol = _bounds(case, spec, first)[0], spec.atol(args, kwargs, case.precision)
    else:
        rtol, atol = _bounds(case, spec, first)
    problems = differences("the result", ours.result, want, rtol, atol)
    for position, (got, expected) in enumerate(zip(ours.tensors, theirs.tensors, strict=True)):
        if expected is not want:  # the written out= was compared as the result
            rtol, atol = _bounds(case, spec, expected)
            name = f"argument {position} after the call"
            problems += differences(name, got, expected, rtol, atol)
    return problems


def _bounds(case, spec, want):
    """(rtol, atol) for `want`, torch's tensor (or what it returned), as
    tests/tolerances.py has them: the op's declared ones for the case's dtype, else
    the table's for `want`'s dtype (products and attention add a bound of their own:
    fuzz_ops.Spec.atol)."""
    if not isinstance(want, torch.Tensor):
        return (0.0, 0.0)
    return bounds(case.dtype, spec.tolerance, result=want.dtype)


def _identity_problems(theirs, ours):
    for position, tensor in enumerate(theirs.tensors):
        if tensor is theirs.result and ours.result is not ours.tensors[position]:
            return [f"torch returned its argument {position} (out= or in place); ours did not"]
    return []


def _version_problems(theirs, ours):
    return [
        f"argument {position}: torch bumped its version counter (autograd sees the write), "
        "ours did not"
        for position, (mine, yours) in enumerate(zip(theirs.bumped, ours.bumped, strict=True))
        if mine and not yours
    ]


def differences(name, got, want, rtol, atol):
    """What differs between `got` and `want`: type, dtype, shape, device, and elements
    beyond |got - want| <= atol + rtol |want| (NaN matching NaN, infinities equal).
    Tuples (attention's output and log-sum-exp) compare item by item, each at its
    dtype's bounds past the first."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return [f"{name}: ours is {_meta(got)}, torch's a tuple of {len(want)}"]
        problems = []
        for index, (one, theirs) in enumerate(zip(got, want, strict=True)):
            bounds_ = (rtol, atol) if index == 0 else (max(rtol, 1e-3), 1e-3)
            problems += differences(f"{name}[{index}]", one, theirs, *bounds_)
        return problems
    problems = _meta_problems(name, got, want)
    if problems or isinstance(want, FakeTensor):
        return problems
    got, want = (value.inner if isinstance(value, Wrapper) else value for value in (got, want))
    if want.dtype.is_complex:  # part by part (sgn's)
        got, want = (torch.view_as_real(value.resolve_conj()) for value in (got, want))
    if want.dtype.is_floating_point:
        g, w = got.double(), want.double()
        atol = atol.to(w.device) if isinstance(atol, torch.Tensor) else atol
        near = (g - w).abs() <= atol + rtol * w.abs()
        wrong = ~torch.where(w.isfinite(), near, (g == w) | (g.isnan() & w.isnan()))
    else:
        wrong = got != want
    count = int(wrong.sum())
    if not count:
        return []
    where = tuple(int(i) for i in wrong.nonzero()[0])
    bound = atol[where].item() if isinstance(atol, torch.Tensor) and atol.ndim else atol
    return [
        f"{name}: {count} of {want.numel()} elements differ beyond rtol {rtol}, atol "
        f"{float(bound):.3g}; at {list(where)} ours {got[where].item()!r}, "
        f"torch {want[where].item()!r}"
    ]


def _meta_problems(name, got, want):
    if not isinstance(got, torch.Tensor):
        return [f"{name}: ours is {_meta(got)}, torch's {_meta(want)}"]
    if isinstance(want, FakeTensor) and not isinstance(got, FakeTensor):
        return [f"{name}: ours computed a real tensor from FakeTensors"]
    for what in ("dtype", "shape", "device"):
        if getattr(got, what) != getattr(want, what):
            return [f"{name}: ours has {what} {getattr(got, what)}, torch's {getattr(want, what)}"]
    return []


def _dropout_problems(case, spec, theirs, ours, args, kwargs):
    """Masks are random: each element is zero or the input scaled by 1 / (1 - p) (the
    input itself without training or p = 0), and about 1 - p of them are kept."""
    bound = inspect.signature(F.dropout).bind(*args, **kwargs)
    bound.apply_defaults()
    x, p, training = bound.arguments["input"], bound.arguments["p"], bound.arguments["training"]
    got = ours.result
    problems = _meta_problems("the result", got, theirs.result)
    if problems or isinstance(got, (FakeTensor, Wrapper)):
        return problems
    if not training or p == 0:
        return differences("the result", got, x, 0, 0)
    rtol, atol = bounds(x.dtype)
    scaled = (x.float() * (0.0 if p == 1 else 1 / (1 - p))).to(x.dtype).double()
    g = got.double()
    kept = (g - scaled).abs() <= atol + rtol * scaled.abs()
    # torch multiplies by the mask, so a dropped inf or NaN comes out NaN; 0 is right too
    wrong = ~((g == 0) | (g == scaled) | kept | (g.isnan() & ~x.isfinite()))
    if wrong.any():
        return [f"dropout: {int(wrong.sum())} elements are neither 0 nor input / (1 - p)"]
    telling = (scaled != 0) & scaled.isfinite()  # elements whose fate the result shows
    count = int(telling.sum())
    if count >= 100:
        fraction = float((telling & (g != 0)).sum()) / count
        spread = 5 * (p * (1 - p) / count) ** 0.5 + 1 / count
        if abs(fraction - (1 - p)) > spread:
            return [f"dropout: kept {fraction:.3f} of {count} elements, p={p}"]
    return []


def _text(error):
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0][:300]}"


def _meta(value):
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"
