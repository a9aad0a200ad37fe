"""Which cubin (or PTX) a device gets from a multi-arch wheel, decided by the
launcher without a GPU (`_C.plan`), and the errors for GPUs the wheel cannot serve."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from ntops_aot.aot import build as pipeline
from ntops_aot.aot.package.stage import ptx_kernels
from tests.wheels import install

PLAN = """
import json, sys, torch, ntops_prebuilt as nt
x = torch.empty(100, dtype=torch.float16, device="meta")
chosen = {}
for capability in (75, 80, 86, 89, 90, 100, 103, 120):
    try:
        chosen[capability] = nt._C.plan(nt._C.group("abs"), capability, x, x)["kernel"]
    except nt.NotBuiltError as error:
        chosen[capability] = "error: " + str(error)
print(json.dumps(chosen))
"""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """abs, fp16, 1 dim for sm_80, sm_86 and sm_90: with and without --ptx."""
    build_dir = tmp_path_factory.mktemp("arches")
    built = {}
    for ptx in (False, True):
        options = pipeline.BuildOptions(
            arches=("sm_80", "sm_86", "sm_90"),
            ops=("abs",),
            dtypes=("fp16",),
            ndims=(1,),
            build_dir=build_dir,
            out_dir=build_dir / f"dist-{ptx}",
            jobs=2,
            ptx=ptx,
        )
        built[ptx] = pipeline.build(options).wheel
    return built


def chosen(wheel, tmp_path):
    site = install(wheel, tmp_path / "site")
    environ = {**os.environ, "PYTHONPATH": str(site)}
    said = subprocess.run(
        [sys.executable, "-c", PLAN], capture_output=True, text=True, env=environ, check=True
    )
    return {int(capability): kernel for capability, kernel in json.loads(said.stdout).items()}


def test_each_gpu_gets_the_best_cubin_of_its_major_version(wheels, tmp_path):
    kernels = chosen(wheels[False], tmp_path)
    assert kernels[80].startswith("abs-sm_80-")
    assert kernels[86].startswith("abs-sm_86-")
    assert kernels[89].startswith("abs-sm_86-")  # no sm_89 cubin: the best of 8.x
    assert kernels[90].startswith("abs-sm_90-")  # sm_90a: 9.0 only
    for capability in (100, 103, 120):
        error = kernels[capability]
        assert error.startswith(f"error: ntops_prebuilt.abs: no prebuilt kernel for this call "
                                f"(arch sm_{capability}, dtype float16")  # fmt: skip
        assert "This wheel has abs for arches sm_80, sm_86, sm_90" in error
        if capability != 103:
            assert f"ntops-aot build --arch sm_80,sm_86,sm_90,sm_{capability} --ops abs" in error
    assert "ntops-aot builds for sm_80, sm_86, sm_89, sm_90, sm_100, sm_120" in kernels[103]
    assert "this GPU (sm_75) is none of them" in kernels[75]


def test_ptx_only_where_no_cubin_runs(wheels, tmp_path):
    kernels = chosen(wheels[True], tmp_path)
    assert kernels[80].startswith("abs-sm_80-")
    assert kernels[89].startswith("abs-sm_86-")
    assert kernels[90].startswith("abs-sm_90-")
    assert not any(kernels[c].endswith("+ptx") for c in (80, 86, 89, 90))
    # The newest portable PTX (sm_86's; sm_90a's runs on 9.0 only) serves later GPUs.
    for capability in (100, 103, 120):
        assert kernels[capability].startswith("abs-sm_86-fp16-nd1/")
        assert kernels[capability].endswith("+ptx")
    assert kernels[75].startswith("error: ")


def test_the_manifest_lists_the_ptx_shipped(wheels):
    with zipfile.ZipFile(wheels[True]) as archive:
        manifest = json.loads(archive.read("ntops_prebuilt/manifest.json"))
    assert manifest["build"]["ptx"] is True
    by_arch = {v["arch"]: v["kernels"] for v in manifest["variants"]}
    assert all("ptx_sha256" in kernel for kernel in by_arch["sm_86"])
    assert not any("ptx_sha256" in k for k in by_arch["sm_80"] + by_arch["sm_90"])
    with zipfile.ZipFile(wheels[False]) as archive:
        manifest = json.loads(archive.read("ntops_prebuilt/manifest.json"))
    assert not any("ptx_sha256" in k for v in manifest["variants"] for k in v["kernels"])


def test_ptx_of_arch_specific_targets_is_not_shipped(wheels, registry):
    kernels = pipeline.build(
        pipeline.BuildOptions(
            arches=("sm_90", "sm_100"),
            ops=("abs",),
            dtypes=("fp16",),
            ndims=(1,),
            build_dir=wheels[True].parents[1],
            out_dir=wheels[True].parents[1] / "dist-a",
            jobs=2,
        )
    ).kernels
    assert {kernel.target for kernel in kernels} == {"sm_90a", "sm_100a"}
    assert ptx_kernels(kernels) == []


def test_ptx_images_are_the_ptx_the_manifest_names(wheels, tmp_path):
    check = """
import hashlib, re, ntops_prebuilt as nt
claimed = {k["id"]: k for v in nt.manifest()["variants"] for k in v["kernels"]}
ptx = [i for i, kernel in enumerate(nt._C.kernels()) if kernel.endswith("+ptx")]
assert len(ptx) == 4, nt._C.kernels()
for index in ptx:
    image = nt._C.image(index)
    kernel = claimed[nt._C.kernels()[index].removesuffix("+ptx")]
    assert image.endswith(b"\\0") and image.count(b"\\0") == 1
    assert hashlib.sha256(image[:-1]).hexdigest() == kernel["ptx_sha256"]
    assert re.search(rb"^\\.target sm_86$", image, re.M), image[:400]
print("ok")
"""
    site = install(wheels[True], tmp_path / "site")
    environ = {**os.environ, "PYTHONPATH": str(site)}
    said = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, env=environ
    )
    assert said.stdout.strip() == "ok", said.stderr


FP8_PLAN = """
import json, torch, ntops_prebuilt as nt
x = torch.empty(4, 256, dtype=torch.float16)
scales = torch.empty(4, 2, dtype=torch.float32)
group = nt._C.group("per_token_group_quant_fp8-group=128")
said = {}
for capability in (80, 86, 89, 90):
    try:
        said[capability] = nt._C.plan(
            group, capability, x, scales, 1e-10, float("inf"), None
        )["kernel"]
    except nt.NotBuiltError as error:
        said[capability] = "error: " + str(error)
print(json.dumps(said))
"""


def test_fp8_ops_are_built_for_sm_89_on_and_say_so_elsewhere(tmp_path):
    """An op declared for FP8's arches (VariantSpace.arches) is left out of the others'
    builds, and a call on them says why, not which command would add it."""
    options = pipeline.BuildOptions(
        arches=("sm_80", "sm_90"),
        ops=("per_token_group_quant_fp8",),
        dtypes=("fp16",),
        build_dir=tmp_path / "build",
        out_dir=tmp_path / "dist",
        jobs=2,
    )
    site = install(pipeline.build(options).wheel, tmp_path / "site")
    environ = {**os.environ, "PYTHONPATH": str(site)}
    said = subprocess.run(
        [sys.executable, "-c", FP8_PLAN], capture_output=True, text=True, env=environ, check=True
    )
    kernels = {int(c): kernel for c, kernel in json.loads(said.stdout).items()}
    assert kernels[90].startswith("per_token_group_quant_fp8-sm_90-fp16-nd2-group=128")
    for capability in (80, 86):
        assert "FP8 needs sm_89 or newer" in kernels[capability]
        assert f"this GPU is sm_{capability}" in kernels[capability]
        assert "ntops-aot build" not in kernels[capability]
    assert "ntops-aot build --arch sm_90,sm_89" in kernels[89]
