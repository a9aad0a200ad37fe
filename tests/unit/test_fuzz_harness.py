"""The fuzz harness (tests/gpu/fuzz.py) without a GPU: torch's references fuzzed
against themselves on CPU tensors all agree; sabotaged ones are caught; refusals are
told apart; a crash or a hang is that case's failure and the run goes on; a case is
drawn the same in any process; and the ops fuzzed are the runtime's, with its dtypes."""

import os
import pathlib
import subprocess
import sys
import time
import types

import torch

from ntops_aot.aot.declare.space import DTYPES
from tests.gpu import fuzz
from tests.gpu.fuzz_check import (
    BOTH_RAISE,
    CRASH,
    ERROR,
    MATCH,
    MISMATCH,
    REFUSED,
    built_space,
    differences,
    run_case,
)
from tests.gpu.fuzz_inputs import describe
from tests.gpu.fuzz_ops import HAND, REFERENCE, SPECS, declared_specs, make_case

ROOT = pathlib.Path(__file__).parents[2]


def _add_scaled(input, other, *, alpha=1, out=None):
    return torch.add(input, other, alpha=alpha * 1.01, out=out)


def _mul_ignoring_out(input, other, *, out=None):
    return torch.mul(input, other)


def _neg_unversioned(input, *, out=None):
    """Writes out= behind autograd's back (`.data` has a version counter of its own)."""
    if out is None:
        return torch.neg(input)
    torch.neg(input, out=out.data)
    return out


def _sin_refusing(input, *, out=None):
    raise TypeError("sin: no kernel for this call")


def _cos_unnamed(input, *, out=None):
    raise RuntimeError("no kernel for this call")


def _tanh_merging(input, *, out=None):
    raise RuntimeError(f"ntops_prebuilt.tanh: no kernel ({input.ndim} dims after merging)")


def _abort(*args, **kwargs):
    os.abort()


def _hang(*args, **kwargs):
    time.sleep(60)


def shim(**replaced):
    return types.SimpleNamespace(**{**vars(REFERENCE), **replaced})


SABOTAGED = shim(add=_add_scaled, mul=_mul_ignoring_out, neg=_neg_unversioned)
REFUSING = shim(sin=_sin_refusing, cos=_cos_unnamed, tanh=_tanh_merging)
CRASHING = shim(exp=_hang, neg=_abort)


def run_in_process(module, ops, count, seed=0):
    space = built_space(module)
    return [run_case(make_case(seed, i, ops), module, "cpu", space) for i in range(count)]


def test_references_fuzzed_against_themselves_agree():
    results = run_in_process(REFERENCE, None, 1200) + run_in_process(REFERENCE, None, 400, 1)
    unexpected = [r for r in results if r.outcome not in (MATCH, BOTH_RAISE)]
    assert not unexpected, unexpected[:5]
    assert {r.op for r in results if r.outcome == MATCH} == set(SPECS)


def test_sabotaged_ops_are_caught_and_the_others_match():
    results = run_in_process(SABOTAGED, ("abs", "add", "mul", "neg"), 400)
    failed = {op: [r for r in results if r.op == op and r.outcome == MISMATCH] for op in SPECS}
    assert not failed["abs"]
    caught = {op: " ".join(r.detail for r in failed[op]) for op in ("add", "mul", "neg")}
    assert caught["add"].count("elements differ") > 30, "1% off (within bf16 tolerance at times)"
    assert caught["mul"].count("ours did not") > 10, "mul ignores out="
    assert caught["neg"].count("version counter") > 10, "neg writes out= behind autograd"


def test_refusals_are_allowed_only_outside_the_built_space_and_naming_the_op():
    results = run_in_process(REFUSING, ("cos", "sin", "tanh"), 300)
    sin = [r for r in results if r.op == "sin"]
    assert {r.outcome for r in sin} == {REFUSED, ERROR, BOTH_RAISE}
    for result in sin:
        case = make_case(0, result.index, ("cos", "sin", "tanh"))
        outside = case.outside or case.dtype not in SPECS["sin"].dtypes
        if result.outcome != BOTH_RAISE:
            assert (result.outcome == REFUSED) == bool(outside), describe(case)
    cos = [r for r in results if r.op == "cos" and r.outcome != BOTH_RAISE]
    assert cos
    assert all(r.outcome == ERROR and "without naming" in r.detail for r in cos)
    # Without a manifest nothing says how many dims tanh's kernels take: a refusal
    # citing merged dims is an error; with one that says 4, 5-dim calls may be refused.
    tanh = [r for r in results if r.op == "tanh" and r.outcome == ERROR]
    assert tanh


def test_a_manifest_narrows_the_space_to_what_was_built():
    def manifest():
        dtypes = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
        ops = {op: {"dtypes": list(dtypes), "ndims": [1, 2, 4]} for op in ("add", "tanh")}
        return {"dtypes": dtypes, "build": {"dtypes": ["fp16"], "ops": ["tanh"]}, "ops": ops}

    space = built_space(types.SimpleNamespace(manifest=manifest))
    assert space["tanh"].dtypes == {torch.float16}
    assert space["tanh"].max_ndim == 4
    assert not space["add"].dtypes
    module = shim(tanh=_tanh_merging, manifest=manifest)
    cases = [make_case(0, i, ("tanh",)) for i in range(200)]
    for case in cases:
        result = run_case(case, module, "cpu", built_space(module))
        ndim = len(case.shapes[case.args[0]][0])
        inside = not case.outside and case.dtype == torch.float16 and ndim <= 4
        assert result.outcome in (BOTH_RAISE, ERROR if inside else REFUSED), describe(case)


def test_a_crash_or_a_hang_fails_its_case_and_the_run_goes_on():
    summary = fuzz.run(
        0, range(4), ops=("abs", "exp", "neg"), module=f"{__name__}:CRASHING", device="cpu",
        timeout=3,
    )  # fmt: skip
    results = {r.index: r for r in summary.results}
    assert [results[i].op for i in range(4)] == ["abs", "exp", "neg", "abs"]
    assert results[0].outcome == results[3].outcome == MATCH
    assert results[1].outcome == results[2].outcome == CRASH
    assert "no answer in 3 s" in results[1].detail
    assert "SIGABRT" in results[2].detail
    assert "Fatal Python error: Aborted" in results[2].detail  # the worker's stderr
    command = summary.command(2)
    assert command.startswith("python tests/gpu/fuzz.py --seed 0 --case 2 -v --ops abs,exp,neg")
    assert summary.as_json()["totals"][CRASH] == 2


def test_a_case_is_drawn_the_same_in_any_process():
    first, again = make_case(3, 17), make_case(3, 17)
    assert describe(first) == describe(again)
    for a, b in zip(first.bases, again.bases, strict=True):
        torch.testing.assert_close(a.values, b.values, rtol=0, atol=0, equal_nan=True)
    assert describe(make_case(4, 17)) != describe(first)
    command = [sys.executable, "tests/gpu/fuzz.py", "--seed", "3", "--case", "17", "-v"]
    command += ["--module", "tests.gpu.fuzz_ops:REFERENCE", "--device", "cpu"]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    shown = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(describe(first) + "\n"), shown.stdout


def test_the_generator_draws_every_kind_of_input():
    cases = [make_case(0, i) for i in range(2500)]
    # Attention's rarer draws from attention's own turns: every op added thins them out.
    attention = [make_case(0, i, ["scaled_dot_product_attention"]) for i in range(400)]
    text = "\n".join(describe(case) for case in cases + attention)
    for words in (
        "._neg_view()", ".conj().imag", ".permute", ".expand", ":2]", "[0]", "[]",
        "on the CPU", "wrapped as a fake", "wrapped as a subclass", "special values",
        "out= is an input", "out= partly overlaps", "out= has elements that share",
        "out= on the CPU", "the other operand a slice of it", "a KV cache",
        "inplace=True", "precision: high", "promotes", "head_dim 80",
    ):  # fmt: skip
        assert words in text, words
    assert any(0 in case.shapes[case.args[0]][0] for case in cases if case.args)


def test_differences_fail_beyond_the_tolerance():
    want = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert not differences("x", want.clone(), want, 1e-3, 1e-3)
    assert not differences("x", want + torch.tensor([5e-4, 0, 0, 0]), want, 1e-3, 0)
    for wrong in ([1.01, float("nan"), float("inf"), -2.0], [1.0, 0.0, float("inf"), -2.0]):
        assert differences("x", torch.tensor(wrong), want, 1e-3, 1e-3)
    assert differences("x", torch.tensor([1.0, float("nan"), 1e30, -2.0]), want, 1e-3, 1e-3)
    assert differences("x", want.half(), want, 1, 1) == [
        "x: ours has dtype torch.float16, torch's torch.float32"
    ]
    bound = torch.tensor([0.0, 0.0, 0.0, 0.5])
    assert not differences("x", want + torch.tensor([0, 0, 0, 0.4]), want, 0, bound)
    assert differences("x", want + torch.tensor([0.1, 0, 0, 0]), want, 0, bound)
    assert differences("x", torch.tensor([True, False]), torch.tensor([True, True]), 1, 1)


def _declared(registry):
    """The fuzz's specs of the kernel files' declarations (as of a wheel of them all)."""
    apis = [api for op in registry.values() for api in op.apis()]
    return declared_specs(apis, {name: op.space.dtypes for name, op in registry.items()})


def test_every_runtime_function_is_fuzzed_with_its_kernels_dtypes(registry):
    """A composite op has a spec of its own; an ordinary op one, or the one its
    declaration gives (fuzz_ops._declared): in the dtypes its kernels are built for
    (tests/unit/test_coverage.py fails for a function without)."""
    specs = _declared(registry)
    assert set(HAND) <= set(specs)
    served_by = {api["name"]: name for name, op in registry.items() for api in op.apis()}
    for name, spec in specs.items():
        op = spec.kernel or served_by[name]
        declared = {getattr(torch, DTYPES[short].torch) for short in registry[op].space.dtypes}
        assert set(spec.dtypes) == declared, name


def test_specs_drawn_from_declarations_draw_calls_torch_agrees_with(registry, monkeypatch):
    """The ordinary ops without a hand spec (their calls drawn from their declarations):
    their references fuzzed against themselves agree, every one of them."""
    derived = {name: spec for name, spec in _declared(registry).items() if name not in HAND}
    assert derived
    for name, spec in derived.items():
        monkeypatch.setitem(SPECS, name, spec)
    module = types.SimpleNamespace(**{name: spec.reference for name, spec in SPECS.items()})
    results = run_in_process(module, tuple(derived), 30 * len(derived))
    unexpected = [r for r in results if r.outcome not in (MATCH, BOTH_RAISE)]
    assert not unexpected, unexpected[:5]
    assert {r.op for r in results if r.outcome == MATCH} == set(derived)
