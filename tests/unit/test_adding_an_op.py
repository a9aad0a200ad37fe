"""Adding an op is writing one kernel file: in a copy of the tree, a new file in
kernels/ is built into a wheel that exports the function with its signature and its
torch.library overloads, the GPU suite collects tests for it from its samples, the
completeness test finds it in every suite and its kernel runs interpreted. Nothing
else in the copy is edited."""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

from tests.wheels import install

ROOT = pathlib.Path(__file__).parents[2]
# torch.nn.functional.hardsigmoid, which the wheel does not have: relu6(x + 3) / 6.
KERNEL = '''
"""hardsigmoid: relu6(x + 3) / 6 (torch.nn.functional.hardsigmoid), in fp32."""

import ninetoothed.language as ntl

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace
from ._lib import element_wise

SPACE = VariantSpace(dtypes=FLOATS, ndims=element_wise.NDIMS)
API = Api(
    "(Tensor input, bool inplace=False)",
    "torch.nn.functional.hardsigmoid",
    samples=(sample(input=(6, 42, 123)), sample(input=())),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, output):
    x = ntl.cast(input, ntl.float32)
    output = ntl.minimum(ntl.maximum(x + 3.0, 0.0), 6.0) / 6.0  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE):
    return element_wise.unary(application, ndim, dtype, block_size=block_size)
'''
CHECK = """
import inspect, torch, ntops_prebuilt
function = ntops_prebuilt.hardsigmoid
assert "hardsigmoid" in ntops_prebuilt.torch.__all__
assert str(inspect.signature(function)) == "(input, inplace=False)", inspect.signature(function)
assert torch.ops.ntops_prebuilt.hardsigmoid.default is not None
assert torch.ops.ntops_prebuilt.hardsigmoid_.default is not None
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    x = torch.empty(3, 5, device="cuda", dtype=torch.float16)
    y = function(x)
    assert (y.shape, y.dtype, y.device.type) == (x.shape, x.dtype, "cuda")
print("exported")
"""


def _tree(copy):
    """The project's packages as an installed ntops_aot sees them, copied."""
    package = copy / "ntops_aot"
    ignore = shutil.ignore_patterns("__pycache__", "tuning")
    for folder in ("aot", "cli", "kernels"):
        shutil.copytree(ROOT / folder, package / folder, ignore=ignore)
    shutil.copytree(ROOT / "kernels" / "tuning", package / "kernels" / "tuning")
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", copy)  # pytest's markers
    return package


def test_one_kernel_file_adds_an_exported_tested_function(tmp_path):
    copy = tmp_path / "tree"
    package = _tree(copy)
    (package / "kernels" / "hardsigmoid.py").write_text(textwrap.dedent(KERNEL).lstrip())
    env = {**os.environ, "PYTHONPATH": str(copy), "HOME": str(tmp_path)}
    build = [sys.executable, "-c", "from ntops_aot.cli.main import main; main()", "build"]
    options = ["--arch", "sm_90", "--ops", "hardsigmoid", "--dtypes", "fp32", "--ndims", "1"]
    options += ["--build-dir", str(tmp_path / "generated"), "--out", str(tmp_path / "dist")]
    done = subprocess.run([*build, *options], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    site = install(next((tmp_path / "dist").glob("*.whl")), tmp_path / "site")

    ran = subprocess.run(
        [sys.executable, "-c", CHECK], env={**env, "PYTHONPATH": str(site)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip() == "exported"

    collect = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
    ]
    collected = subprocess.run(
        [*collect, "tests/gpu/test_ops.py"], cwd=copy, env={**env, "PYTHONPATH": f"{site}:{copy}"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    ids = [line for line in collected.stdout.splitlines() if "hardsigmoid" in line]
    assert len(ids) == 2 * 2, collected.stdout[-3000:]  # two samples, two layouts, fp32

    # Every suite has it (the completeness test), and its kernel runs interpreted.
    suites = ["tests/unit/test_coverage.py", "tests/unit/test_interpreted.py::test_ordinary_ops"]
    checked = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *suites],
        cwd=copy, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
