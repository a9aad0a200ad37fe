"""The oldest torch the wheel claims (its Requires-Dist) registers every op at import and
propagates fake tensors through them, on the CPU: test_library's calls (every declared
function's, tests/calls.py), run by the interpreter of .venv-oldest (`make install` sets
it up with that torch)."""

import pathlib
import subprocess

import pytest

from ntops_aot.aot.package.wheel import MIN_TORCH

ROOT = pathlib.Path(__file__).parents[2]
OLDEST = ROOT / ".venv-oldest" / "bin" / "python"

CHILD = """
import sys
sys.path[:0] = [{site!r}, {root!r}]
import warnings
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
import ntops_prebuilt as nt
from tests.calls import KNOWN, on
from tests.unit.test_library import NoDevice, answer, calls, difference

assert "torch._dynamo" not in sys.modules
print(torch.__version__)
written = torch.zeros(2)  # version counters move in the form this torch takes (a tensor)
before = written._version
nt._library.increment_versions((written, written))
assert written._version == before + 2, (before, written._version)
warnings.filterwarnings("ignore", "An output with one or more elements was resized")
apis = {{api["name"]: api for api in nt._ops.APIS}}
checked = set()
with FakeTensorMode(allow_non_fake_inputs=False):
    for call in calls(nt):
        if call.name == "scaled_dot_product_attention":
            # torch 2.4's own attention lacks enable_gqa and asks the (absent) GPU which
            # kernel to take, even on fake tensors; a newer torch checks it against
            # torch's in test_library
            arguments = call.arguments(on("cuda"))
            try:
                got, error = answer(nt.scaled_dot_product_attention, arguments)
            except NoDevice:
                continue
            query = arguments[0][0]
            assert error is None and got.shape == query.shape, (call.label, error)
            assert got.is_contiguous(), (call.label, got.stride())
            checked.add(call.name)
            continue
        if call.label.startswith("conv2d of a channels-last"):
            # an input or a weight: torch 2.4's meta conv2d lays the output out
            # contiguous, its cuDNN kernels and a newer torch's meta channels-last
            # (test_library checks ours against those)
            checked.add(call.name)
            continue
        try:
            # references on the meta device: on fake CUDA tensors this torch asks the
            # absent GPU for some (a driver it lacks)
            problem = difference(nt, call, apis[call.name], reference_on="meta")
        except NoDevice:
            continue
        assert problem is None or call.name in KNOWN, (call.label, problem)
        checked.add(call.name)
missing = sorted(set(apis) - checked)
assert not missing, f"no call of {{missing}} checked"
print(len(checked))
"""


def test_the_oldest_torch_registers_the_ops_and_propagates_fakes(installed):
    if not OLDEST.exists():
        pytest.fail(f"{OLDEST} is missing: `make install` sets it up with torch {MIN_TORCH}")
    site = str(pathlib.Path(installed.__path__[0]).parent)
    run = subprocess.run(
        [str(OLDEST), "-c", CHILD.format(site=site, root=str(ROOT))],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    version, count = run.stdout.split()
    assert version.split("+")[0].rsplit(".", 1)[0] == MIN_TORCH, version
    assert int(count) >= 40  # every declared function, each on one call at least
