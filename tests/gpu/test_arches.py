"""A wheel on a GPU it has no cubin for: with --ptx the driver JIT-compiles the PTX
(with a warning), without it the call fails naming the wheel's arches.

Needs two wheels built for an arch of another major version than this GPU's (sm_80
on an H100): `NTOPS_AOT_ARCH_WHEELS` names a folder with `ptx/*.whl` (built with
--ptx) and `cubin/*.whl` (without). Each is installed into its own folder and used
from a fresh process, as a service would."""

import os
import pathlib
import subprocess
import sys

import pytest

CALL = """
import json, time, warnings, torch, ntops_prebuilt as nt
x = torch.randn(1000, dtype=torch.float16, device="cuda")
report = {"capability": torch.cuda.get_device_capability()}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        torch.cuda.synchronize()
        start = time.perf_counter()
        y = nt.abs(x)
        torch.cuda.synchronize()
        report["first_call_s"] = time.perf_counter() - start
        report["equal"] = bool(torch.equal(y, torch.abs(x)))
        report["kernel"] = nt._C.last_kernel()
        start = time.perf_counter()
        nt.abs(x)
        torch.cuda.synchronize()
        report["second_call_s"] = time.perf_counter() - start
    except nt.NotBuiltError as error:
        report["error"] = str(error)
report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def wheels():
    folder = os.environ.get("NTOPS_AOT_ARCH_WHEELS")
    if not folder:
        pytest.skip("NTOPS_AOT_ARCH_WHEELS names no folder of sm_80 wheels")
    return pathlib.Path(folder)


def run(wheel_dir, tmp_path):
    import json

    (wheel,) = wheel_dir.glob("*.whl")
    site = tmp_path / wheel_dir.name
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*install, "--target", site, wheel], check=True)
    said = subprocess.run(
        [sys.executable, "-c", CALL],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
    )
    return json.loads(said.stdout)


def test_no_cubin_for_this_gpu_names_the_wheels_arches(nt, wheels, tmp_path):
    report = run(wheels / "cubin", tmp_path)
    major, minor = report["capability"]
    arch = f"sm_{major}{minor}"
    assert "error" in report, report
    assert f"no prebuilt kernel for this call (arch {arch}" in report["error"]
    assert "This wheel has abs for arches sm_80" in report["error"]
    assert f"ntops-aot build --arch sm_80,{arch} --ops abs" in report["error"]
    assert report["warnings"] == []


def test_ptx_is_compiled_by_the_driver_with_a_warning(nt, wheels, tmp_path):
    report = run(wheels / "ptx", tmp_path)
    assert "error" not in report, report
    assert report["equal"]
    assert report["kernel"].startswith("abs-sm_80-fp16-nd1/")
    assert report["kernel"].endswith("+ptx")
    (warning,) = report["warnings"]
    assert warning.startswith("RuntimeWarning: ntops_prebuilt: this wheel has no cubin for sm_")
    assert "JIT-compiling the PTX of sm_80" in warning
    print(
        f"first call (JIT) {report['first_call_s']:.4f} s, second {report['second_call_s']:.6f} s"
    )
