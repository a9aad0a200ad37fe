"""`ntops-aot`: exit codes, messages that list what exists, a real build."""

import subprocess
import sys
import zipfile

import pytest


def cli(*args, cwd=None):
    command = [sys.executable, "-m", "ntops_aot.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd)


def test_version():
    run = cli("--version")
    assert run.returncode == 0
    assert run.stdout.startswith("ntops-aot, version 0.1.0")


def test_list_prints_variant_ids(tmp_path):
    run = cli(
        "list",
        "--arch",
        "sm_90",
        "--ops",
        "softm*",
        "--dtypes",
        "fp16",
        "--build-dir",
        str(tmp_path),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["softmax-sm_90-fp16-nd2", "softmax-sm_90-fp16-nd3"]


@pytest.mark.parametrize(
    ("args", "listed"),
    [
        # the functions an op serves after its name (a list that grows with the ops)
        (("--ops", "fft"), ", bitwise (bitwise_and, bitwise_or), bitwise_not,"),
        (("--arch", "sm_75"), "arches: sm_80, sm_86, sm_89, sm_90, sm_100, sm_120, all"),
        (("--dtypes", "fp8"), "dtypes: fp16, bf16, fp32, fp64, i8, i16, i32, i64, u8, bool"),
        (("--num-warps", "3"), "--num-warps must be a power of two"),
        (("--ndims", "two"), "--ndims: 'two': expected comma-separated integers"),
    ],
)
def test_bad_selections_exit_with_usage_errors(tmp_path, args, listed):
    run = cli("build", *args, "--build-dir", str(tmp_path), "--out", str(tmp_path))
    assert run.returncode == 2
    assert listed in run.stderr
    assert not list(tmp_path.glob("*.whl"))


def test_build_writes_the_wheel_into_out(tmp_path):
    out = tmp_path / "wheels"
    run = cli(
        "build",
        "--arch",
        "sm_90",
        "--ops",
        "gelu",
        "--dtypes",
        "fp32",
        "--ndims",
        "1",
        "--out",
        str(out),
        "--build-dir",
        str(tmp_path / "generated"),
        "--jobs",
        "1",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    (wheel,) = out.glob("ntops_prebuilt-*.whl")
    # gelu's two switches, four specs each
    assert "2 variants (2 compiled, 0 cached), 8 kernels" in run.stdout
    with zipfile.ZipFile(wheel) as archive:
        assert "ntops_prebuilt/_C.abi3.so" in archive.namelist()
    assert not (tmp_path / "dist").exists()
