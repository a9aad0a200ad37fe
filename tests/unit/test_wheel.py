"""Stage 5: a standard abi3 wheel that pip installs next to torch alone."""

import base64
import csv
import hashlib
import importlib.metadata
import io
import json
import pathlib
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ntops_aot.aot.package import wheel as package

RUNTIME = {
    "__init__.py",
    "torch.py",
    "_addmv.py",
    "_alpha_dropout.py",
    "_attention.py",
    "_avg_pool.py",
    "_batch_norm.py",
    "_bincount.py",
    "_checks.py",
    "_clamp.py",
    "_conv2d.py",
    "_dropout.py",
    "_embedding.py",
    "_errors.py",
    "_flash_attn.py",
    "_fp8_quant.py",
    "_fp8_reference.py",
    "_layer_norm.py",
    "_layout.py",
    "_layout_reference.py",
    "_library.py",
    "_log_softmax.py",
    "_manifest.py",
    "_matmul.py",
    "_max.py",
    "_max_pool.py",
    "_median.py",
    "_paged_checks.py",
    "_paged_reference.py",
    "_preload.py",
    "_quantile.py",
    "_reductions.py",
    "_rms_norm.py",
    "_rotary.py",
    "_rows.py",
    "_sampling.py",
    "_sampling_reference.py",
    "_scaled_mm.py",
    "_settings.py",
    "_sgn.py",
    "_silu_mul.py",
    "_softmax.py",
    "_sort.py",
    "_sums.py",
    "_windows.py",
    "tune.py",
    "integrations",  # a folder: integrations/transformers/*.py (test_runtime_subpackages)
}
# Rendered by the build from the kernel files' declarations (aot/package/exports.py).
GENERATED = {"_functions.py", "_ops.py"}


def read_wheel(path):
    with zipfile.ZipFile(path) as wheel:
        return {name: wheel.read(name) for name in wheel.namelist()}


def test_name_tags_and_layout(small_build):
    wheel = small_build.wheel
    files = read_wheel(wheel)
    tag = package.platform_tag(files["ntops_prebuilt/_C.abi3.so"])  # which: test_manylinux
    assert wheel.name == f"ntops_prebuilt-0.1.0-cp310-abi3-{tag}.whl"
    top = {name.split("/")[0] for name in files}
    assert top == {"ntops_prebuilt", "ntops_prebuilt-0.1.0.dist-info"}
    assert {
        name.split("/")[1] for name in files if name.startswith("ntops_prebuilt/")
    } == RUNTIME | GENERATED | {
        "_C.abi3.so",
        "manifest.json",
    }
    text = files["ntops_prebuilt-0.1.0.dist-info/WHEEL"].decode()
    assert f"Tag: cp310-abi3-{tag}" in text
    assert "Root-Is-Purelib: false" in text
    metadata = files["ntops_prebuilt-0.1.0.dist-info/METADATA"].decode()
    assert [line for line in metadata.splitlines() if line.startswith("Requires-Dist")] == [
        "Requires-Dist: torch>=2.4"
    ]


def test_runtime_subpackages_ship_under_their_folders():
    files = package.runtime_files()
    assert {name for name in files if name.startswith("integrations/")} == {
        "integrations/__init__.py",
        "integrations/transformers/__init__.py",
        "integrations/transformers/_attention.py",
        "integrations/transformers/_batching.py",
        "integrations/transformers/_fused.py",
        "integrations/transformers/_layers.py",
        "integrations/transformers/_self_attention.py",
        "integrations/transformers/_served.py",
    }
    assert not any("__pycache__" in name for name in files)


def test_record_lists_every_file_with_its_hash(small_build):
    files = read_wheel(small_build.wheel)
    record = files.pop("ntops_prebuilt-0.1.0.dist-info/RECORD").decode()
    rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(record))}
    assert rows.pop("ntops_prebuilt-0.1.0.dist-info/RECORD") == ["", ""]
    assert set(rows) == set(files)
    for name, (digest, size) in rows.items():
        expected = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=")
        assert digest == f"sha256={expected.decode()}"
        assert int(size) == len(files[name])


def test_manifest_describes_the_build(small_build, build_dir, registry):
    files = read_wheel(small_build.wheel)
    manifest = json.loads(files["ntops_prebuilt/manifest.json"])
    assert manifest["build"]["arches"] == ["sm_80", "sm_90"]
    assert manifest["build"]["ops"] == ["add", "comparison", "mm", "softmax"]
    assert set(manifest["toolchain"]) == {"ntops-aot", "ninetoothed", "triton", "python", "cc"}
    assert set(manifest["ops"]) == set(registry)  # every op described, built or not
    library = files["ntops_prebuilt/_C.abi3.so"]
    kernels = [k for variant in manifest["variants"] for k in variant["kernels"]]
    assert len(kernels) == len(small_build.kernels)
    for kernel in kernels:
        cubin = (build_dir / "cubins" / f"{kernel['cubin_sha256']}.cubin").read_bytes()
        assert hashlib.sha256(cubin).hexdigest() == kernel["cubin_sha256"]
        assert cubin in library  # embedded, byte for byte
        assert kernel["target"] in ("sm_80", "sm_90a")


def test_extension_exports_only_its_init(small_build, tmp_path):
    library = tmp_path / "_C.abi3.so"
    library.write_bytes(read_wheel(small_build.wheel)["ntops_prebuilt/_C.abi3.so"])
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [s for s in symbols if s.startswith(("Py", "nt_"))] == ["PyInit__C"]
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
    assert "libcuda" not in needed  # dlopened at the first launch


FRESH_CHECK = """
import inspect, sys, torch
import ntops_prebuilt as nt
assert "triton" not in sys.modules and "ninetoothed" not in sys.modules
assert str(inspect.signature(nt.add)) == "(input, other, *, alpha=1, out=None)"
x = torch.ones(3)
try:
    nt.add(x, x)
except TypeError as error:
    assert "expected CUDA tensors" in str(error), error
else:
    raise SystemExit("no error for CPU tensors")
print("ok", len(nt.manifest()["variants"]))
"""


def installed_distributions(python):
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    return {canonicalize_name(entry["name"]) for entry in json.loads(listed.stdout)}


def requirement_closure(name):
    """`name` and every distribution it needs, with the extras asked for on the way
    (torch's CUDA builds need `cuda-toolkit[cublas,...]`)."""
    closure, todo, seen = {}, [(name, "")], set()
    while todo:
        name, extra = todo.pop()
        dist = importlib.metadata.distribution(name)
        key = canonicalize_name(dist.metadata["Name"])
        if (key, extra) in seen:
            continue
        seen.add((key, extra))
        closure[key] = dist
        for text in dist.requires or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                todo += [(requirement.name, wanted) for wanted in {"", *requirement.extras}]
    return closure


def lend(dists, site_packages):
    """Makes `dists`, as installed here, installed in another environment too: a link for
    each top-level entry they own. A second copy of torch would take gigabytes of disk."""
    for dist in dists:
        for top in {file.parts[0] for file in dist.files or () if file.parts[0] != ".."}:
            source = dist.locate_file(top)
            if source.exists() and not (site_packages / top).exists():
                (site_packages / top).symlink_to(source)


def test_installs_into_a_fresh_venv_with_torch_only(small_build, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site_packages = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    torch = requirement_closure("torch")
    lend(torch.values(), pathlib.Path(site_packages))
    with_torch = installed_distributions(python)
    assert set(torch) <= with_torch
    assert "ntops-prebuilt" not in with_torch
    subprocess.run([python, "-m", "pip", "install", "-q", str(small_build.wheel)], check=True)
    # The wheel brings itself and nothing else (torch's CUDA builds bring triton along:
    # the wheel must not import it, which FRESH_CHECK checks).
    assert installed_distributions(python) - with_torch == {"ntops-prebuilt"}
    assert not installed_distributions(python) & {"ninetoothed", "ntops-aot"}
    run = subprocess.run([python, "-c", FRESH_CHECK], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok")


def test_the_extension_embeds_each_kernels_cubin_byte_for_byte(installed):
    claimed = {
        kernel["id"]: kernel
        for variant in installed.manifest()["variants"]
        for kernel in variant["kernels"]
    }
    ids = installed._C.kernels()
    assert sorted(ids) == sorted(claimed)
    for index, kernel_id in enumerate(ids):
        image = installed._C.image(index)
        assert hashlib.sha256(image).hexdigest() == claimed[kernel_id]["cubin_sha256"]
        assert image[:4] == b"\x7fELF"
    with pytest.raises(IndexError, match=f"the extension has {len(ids)} kernels"):
        installed._C.image(len(ids))


def test_rendered_python_is_clean(small_build, tmp_path):
    """The modules rendered from the declarations compile and pass ruff's pyflakes
    rules (an unused name, an undefined one) like the hand-written runtime."""
    files = read_wheel(small_build.wheel)
    for name in GENERATED:
        path = tmp_path / name
        path.write_bytes(files[f"ntops_prebuilt/{name}"])
        compile(path.read_text(), name, "exec")
        ruff = pathlib.Path(sys.executable).with_name("ruff")
        done = subprocess.run(
            [str(ruff), "check", "--no-cache", "--select", "F,E9,B", str(path)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout
