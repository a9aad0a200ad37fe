"""The oldest torch the wheel claims (its Requires-Dist) registers every op at import and
propagates fake tensors through them, on the CPU: test_library's calls, run by the
interpreter of .venv-oldest (`make install` sets it up with that torch)."""

import pathlib
import subprocess

import pytest

from ntops_aot.aot.package.wheel import MIN_TORCH

ROOT = pathlib.Path(__file__).parents[2]
OLDEST = ROOT / ".venv-oldest" / "bin" / "python"

CHILD = """
import sys
sys.path[:0] = [{site!r}, {root!r}]
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
import ntops_prebuilt as nt
from tests.unit.test_library import calls

assert "torch._dynamo" not in sys.modules
print(torch.__version__)
written = torch.zeros(2)  # version counters move in the form this torch takes (a tensor)
before = written._version
nt._library.increment_versions((written, written))
assert written._version == before + 2, (before, written._version)
with FakeTensorMode(allow_non_fake_inputs=False):
    rows = calls(nt)
    for name, ours, theirs in rows:
        got = ours()
        if name == "scaled_dot_product_attention":
            # torch 2.4's own attention asks the (absent) GPU which kernel to take, even
            # on fake tensors; a newer torch checks it against torch's in test_library
            assert got.shape == (1, 32, 5, 128) and got.is_contiguous(), got.shape
            continue
        want = theirs()
        assert type(got) is type(want), name
        got, want = ((t.shape, t.dtype, t.device, t.stride()) for t in (got, want))
        assert got == want, (name, got, want)
print(len(rows))
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
    assert int(count) >= 80  # every op and overload of test_library
