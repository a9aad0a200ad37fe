"""batch_norm and instance_norm (kernels/batch_norm.py, one kernel): outputs and the
running statistics they update against torch's at the tests' tolerances (both compute
in float32 and round once); the interpreted check runs the runtime's wrapper
(aot/runtime/_batch_norm.py) on the CPU, its kernels under Triton's interpreter
(tests/ops/_runtime.py)."""

import pytest
import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided

F = torch.nn.functional
GROUPS = {
    "batch_norm": {f"batch_norm-params={kind}": {"params": kind} for kind in ("same", "fp32")}
}


def num_tensors(variant):
    # input, output, weight, bias, running_mean, running_var, new_mean, new_var
    return 8


def run(nt, variant, spec, dtype, bucket):
    """instance_norm of (N, C, spatial) laid out for the spec (its rows the kernel's),
    with running statistics it updates, in the parameters' dtype of the switch: the
    output and the running statistics, against torch's."""
    shape = spec_shape(3, spec)
    unit = None if spec.unit[0] is None else 2
    x = strided(shape, dtype, unit=unit, aligned=spec.aligned, wide=spec.width == 64)
    kind = torch.float32 if variant["switches"]["params"] == "fp32" else dtype
    c = shape[1]
    weight, bias, mean = (torch.randn(c, device="cuda", dtype=kind) for _ in range(3))
    var = torch.rand(c, device="cuda", dtype=kind) + 0.5
    theirs = (mean.clone(), var.clone())
    output = nt.instance_norm(x, mean, var, weight, bias)
    expected = F.instance_norm(x, *theirs, weight, bias)
    return (output, mean, var), (expected, *theirs)


def check(result, reference, variant, dtype):
    for got, want in zip(result, reference, strict=True):
        close(got, want)


def calls(name, dtype):
    """Forms the samples leave out: running statistics in float32 beside a half-type
    input (the `params` switch), and the layouts torch keeps (batch_norm's output
    channels-last like its input)."""
    if name == "instance_norm":

        def mixed(make):
            stats = [make((3,), torch.float32) for _ in range(2)]
            return (make((2, 3, 9), dtype), *stats), {"use_input_stats": True}

        return [Call(f"{name} of float32 statistics", name, mixed)]

    def channels_last(make):
        x = make((2, 3, 4, 5), dtype, strides=(60, 1, 15, 3))
        return (x, make((3,), torch.float32), make((3,), torch.float32)), {"training": True}

    return [Call(f"{name} channels-last", name, channels_last)]


def fuzz_specs():
    """batch_norm's and instance_norm's (one kernel serves both)."""
    from tests.gpu.fuzz_inputs import FLOATS
    from tests.gpu.fuzz_ops import Spec

    names = ("batch_norm",)
    return {
        "batch_norm": Spec(_draw, batch_norm_reference, FLOATS, names=names),
        "instance_norm": Spec(_draw, F.instance_norm, FLOATS, kernel="batch_norm", names=names),
    }


def batch_norm_reference(
    input, running_mean=None, running_var=None, weight=None, bias=None, training=False,
    momentum=0.1, eps=1e-5,
):  # fmt: skip
    """torch's batch_norm, with the batch's statistics where no running ones are given
    (ntops.torch.batch_norm's; torch refuses those calls in evaluation)."""
    training = training or running_mean is None
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def _draw(d, op):
    """(N, C, *spatial) of 2 to 5 dims in any layout (instance_norm's mostly with a
    spatial dim past 1: it refuses one spatial element with its input's statistics);
    weight and bias now and then; running statistics (float32 beside half types now
    and then), in training or not; momentum and eps now and then."""
    from tests.gpu.fuzz_inputs import FLOATS

    dtype = d.principal(FLOATS)
    shape = [d.rng.randint(1, 9), d.rng.randint(1, 9)]
    shape += [d.rng.randint(1, 40) for _ in range(d.rng.randint(0, 3))]
    if op == "instance_norm" and d.chance(0.9):
        shape += [d.rng.randint(2, 40)]
    x = d.tensor(shape, dtype)
    kind = torch.float32 if dtype in (torch.float16, torch.bfloat16) and d.chance(0.3) else dtype
    c = shape[1]
    flag = "training" if op == "batch_norm" else "use_input_stats"
    kwargs = {flag: d.chance(0.5)} if d.chance(0.7) else {}
    running = d.chance(0.6) or (op == "instance_norm" and kwargs.get(flag) is False)
    args = [x]
    if running:  # written in place: never expanded (torch's writes would race)
        variance = (torch.rand(c, generator=d.generator) + 0.2).to(kind)
        mean = d.tensor((c,), kind, layout="strided")
        args += [mean, d.tensor((c,), kind, layout="strided", values=variance)]
    elif op == "batch_norm":
        args += [None, None]  # torch's batch_norm takes them by position, without defaults
    for name in ("weight", "bias"):
        if d.chance(0.5):
            kwargs[name] = d.tensor((c,), kind)
    if d.chance(0.3):
        kwargs["momentum"] = d.pick((0.0, 0.3, 1.0))
    if d.chance(0.3):
        kwargs["eps"] = d.pick((1e-3, 1e-8, 0.1))
    return tuple(args), kwargs


def interpreted(make):
    """The wrapper and its kernels against torch on the CPU: batch_norm in training
    (its running statistics updated) and not, of 2-dim inputs (the batch as the rows),
    3-dim ones and channels-last and permuted 4-dim ones, without weight or bias, and as
    ntops.torch.batch_norm calls it; instance_norm with and without running statistics
    and input statistics; half types with parameters of their dtype or float32; an
    empty batch; torch's refusals."""
    from tests.ops._runtime import load

    nt = load(make, "_batch_norm", GROUPS)
    x = torch.randn(4, 3, 37) * 3 + 1
    w, b = torch.randn(3), torch.randn(3)
    same(nt.batch_norm, F.batch_norm, x, stats(3), w, b, True, 0.3, 1e-5)
    same(nt.batch_norm, F.batch_norm, x, stats(3), None, b, False, 0.1, 1e-3)
    same(nt.batch_norm, F.batch_norm, torch.randn(9, 3), stats(3), w, None, True)
    last = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    same(nt.batch_norm, F.batch_norm, last, stats(3), w, b, True)
    # Spatial dims that do not merge: normalized through a copy, written into an output
    # laid out as the input (torch's meta kernel's layout; its CPU kernel's is contiguous).
    swapped = torch.randn(2, 3, 5, 4).transpose(2, 3)
    got = nt.batch_norm(swapped, None, None, None, None, True)
    close(got, F.batch_norm(swapped, None, None, None, None, True))
    assert got.stride() == swapped.stride()
    got = nt.batch_norm(x, weight=w, bias=b, eps=1e-3, training=True)  # ntops.torch's call
    close(got, F.batch_norm(x, None, None, w, b, True, eps=1e-3))
    close(nt.batch_norm(x, weight=w), F.batch_norm(x, None, None, w, training=True))
    same(nt.instance_norm, F.instance_norm, x, stats(3), w, b, True, 0.2)
    same(nt.instance_norm, F.instance_norm, x, (None, None), None, b, True)
    same(nt.instance_norm, F.instance_norm, x, stats(3), w, None, False)
    same(nt.instance_norm, F.instance_norm, torch.randn(5, 3), stats(3), None, None, False)
    check_half_types(nt, x, w, b)
    nothing = torch.empty(0, 3, 4)
    same(nt.batch_norm, F.batch_norm, nothing, stats(3), w, b, True)
    check_refusals(nt, x)


def check_half_types(nt, x, w, b):
    """Half-type inputs with parameters of their dtype and float32 ones, against torch's
    float32 result rounded once."""
    for dtype in (torch.float16, torch.bfloat16):
        half = x.to(dtype)
        for kind in (dtype, torch.float32):
            mine = stats(3, kind)
            theirs = tuple(one.float() for one in mine)
            got = nt.batch_norm(half, *mine, w.to(kind), b.to(kind), True)
            want = F.batch_norm(half.float(), *theirs, w.to(kind).float(), b.to(kind).float(), True)
            close(got, want.to(dtype))
            for ours, torchs in zip(mine, theirs, strict=True):
                close(ours, torchs.to(kind))
            got = nt.instance_norm(half, None, None, w.to(kind), None)
            close(got, F.instance_norm(half.float(), None, None, w.to(kind).float()).to(dtype))


def check_refusals(nt, x):
    """What torch refuses, refused: one value a channel in training, one spatial
    element an instance, running statistics given alone or of other sizes, a weight of
    another size; and what the kernels do not take: parameters of mixed dtypes."""
    one = torch.randn(1, 3)
    for bad in [
        lambda f: f.batch_norm(one, None, None, training=True),
        lambda f: f.instance_norm(torch.randn(2, 3, 1)),
        lambda f: f.batch_norm(x, torch.zeros(3), None, training=True),
        lambda f: f.batch_norm(x, torch.zeros(4), torch.ones(4), training=True),
        lambda f: f.batch_norm(x, *stats(3), torch.ones(4), training=True),
    ]:
        for module in (F, nt):
            with pytest.raises((RuntimeError, ValueError)):
                bad(module)
    with pytest.raises(RuntimeError, match="running_mean and running_var to be defined"):
        nt.instance_norm(x, use_input_stats=False)
    with pytest.raises(TypeError, match=r"all be torch\.float16"):
        nt.batch_norm(x.half(), torch.zeros(3), torch.ones(3, dtype=torch.float16))


def stats(c, dtype=torch.float32):
    """Running statistics of `c` channels: means about 0, variances about 1."""
    return torch.randn(c).to(dtype), (torch.rand(c) + 0.5).to(dtype)


def same(ours, theirs, input, running, weight, bias, *rest):
    """`ours` and torch's function on the same arguments (the running statistics
    copied for each), their outputs and updated running statistics compared; the
    output's strides too."""
    copies = [None if one is None else one.clone() for one in running]
    got = ours(input, *running, weight, bias, *rest)
    want = theirs(input, *copies, weight, bias, *rest)
    close(got, want)
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    for mine, torchs in zip(running, copies, strict=True):
        if mine is not None:
            close(mine, torchs)


def close(got, want):
    from tests.tolerances import tolerance

    assert (got.dtype, got.shape) == (want.dtype, want.shape), (got, want)
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(want.dtype))
