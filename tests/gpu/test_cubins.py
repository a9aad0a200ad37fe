"""What the installed wheel embeds, read back from its extension and shown by NVIDIA's
cuobjdump: each cubin is for the arch the manifest claims (PTX: its .target)."""

import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess

import pytest

# `cuobjdump -lelf x.cubin` names each ELF by its arch: "ELF file    1: x.sm_90a.cubin".
ARCH = re.compile(r"^ELF file\s+\d+: .*\.(sm_\w+)\.cubin$", re.M)


def cuobjdump_arch(path):
    said = subprocess.run(
        ["cuobjdump", "-lelf", str(path)], capture_output=True, text=True, check=True
    ).stdout
    found = ARCH.search(said)
    return found.group(1) if found else f"no arch in: {said[:300]!r}"


def test_every_embedded_cubin_is_for_the_arch_the_manifest_claims(nt, tmp_path):
    if shutil.which("cuobjdump") is None:
        pytest.skip("no cuobjdump")
    claimed = {
        kernel["id"]: kernel
        for variant in nt.manifest()["variants"]
        for kernel in variant["kernels"]
    }
    files, ptx = {}, 0
    for index, kernel_id in enumerate(nt._C.kernels()):
        image = nt._C.image(index)
        if kernel_id.endswith("+ptx"):
            kernel = claimed[kernel_id.removesuffix("+ptx")]
            assert hashlib.sha256(image.rstrip(b"\0")).hexdigest() == kernel["ptx_sha256"]
            target = re.search(rb"^\.target (sm_\w+)", image, re.M).group(1).decode()
            assert target == kernel["target"], kernel_id
            ptx += 1
            continue
        kernel = claimed[kernel_id]
        assert hashlib.sha256(image).hexdigest() == kernel["cubin_sha256"], kernel_id
        path = tmp_path / f"{kernel['cubin_sha256']}.cubin"
        if path not in files:
            path.write_bytes(image)
            files[path] = set()
        files[path].add(kernel["target"])
    assert len(claimed) == len(nt._C.kernels()) - ptx
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        shown = dict(zip(files, pool.map(cuobjdump_arch, files), strict=True))
    wrong = {path.name: (claims, shown[path]) for path, claims in files.items()
             if claims != {shown[path]}}  # fmt: skip
    assert not wrong, list(wrong.items())[:5]
    arches = sorted(set(shown.values()))
    print(f"{len(files)} distinct cubins of {len(claimed)} kernels; cuobjdump: {arches}")
