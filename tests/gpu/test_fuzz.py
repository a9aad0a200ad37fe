"""A short run of the fuzz suite (tests/gpu/fuzz.py; `make fuzz` runs a long one):
every op against torch, and the crash isolation it relies on, on a GPU."""

import inspect
import os
import types

import torch

from tests.gpu import fuzz
from tests.gpu.fuzz_check import CRASH, MATCH
from tests.gpu.fuzz_ops import REFERENCE, SPECS

SEED, CASES = 0, 400  # about 10 cases per op


def test_a_short_fuzz_run_agrees_with_torch(nt):
    summary = fuzz.run(SEED, range(CASES))
    failures = [
        f"{r.outcome} {r.op} (case {r.index}): {r.detail}\n  {summary.command(r.index)}"
        for r in summary.failures
    ]
    assert not failures, f"{len(failures)} of {CASES} cases failed:\n" + "\n".join(failures)


def test_every_function_is_fuzzed(nt):
    functions = {
        name
        for name in nt.torch.__all__
        if inspect.isfunction(getattr(nt, name)) and not name.startswith("set_default_")
    }
    # A wrapper's other functions (flash_attn_varlen_func) are its op's (paged_attention's)
    # calls in another convention: the op is fuzzed, they are tested in their own suite.
    assert functions - nt.torch.EXPORTED == set(SPECS)


def _device_assert(input, *, out=None):
    """Poisons the CUDA context: every later CUDA call fails."""
    torch._assert_async(torch.zeros((), dtype=torch.bool, device=input.device))
    torch.cuda.synchronize()


def _abort(*args, **kwargs):
    os.abort()


CRASHING = types.SimpleNamespace(**{**vars(REFERENCE), "exp": _device_assert, "neg": _abort})


def test_a_crashing_case_fails_alone_and_the_run_goes_on(nt):
    summary = fuzz.run(SEED, range(4), ops=("abs", "exp", "neg"), module=f"{__name__}:CRASHING")
    results = {r.index: r for r in summary.results}
    assert [results[i].op for i in range(4)] == ["abs", "exp", "neg", "abs"]
    assert results[0].outcome == results[3].outcome == MATCH
    assert results[1].outcome == results[2].outcome == CRASH
    assert "device-side assert" in results[1].detail
    assert "SIGABRT" in results[2].detail
