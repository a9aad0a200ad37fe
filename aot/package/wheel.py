"""Stage 4 (package), the files it writes: cubins, the compiled extension, the wheel.

The wheel is `ntops_prebuilt`: the runtime's Python files (aot/runtime), the
extension `_C.abi3.so` with every cubin embedded, and `manifest.json`. It is an
abi3 wheel for CPython >= 3.10 whose only dependency is torch. Its bytes depend
only on its inputs: entries sorted, timestamps fixed, no build paths inside.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import importlib.util
import json
import pathlib
import shutil
import subprocess
import sysconfig
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..compile.cubins import CompiledKernel
from ..errors import ExtensionBuildError
from ..store.cache import Cache, extension_key, write_atomic
from ..toolchain.versions import compiler, compiler_version
from . import archive, exports, manylinux

if TYPE_CHECKING:  # importlib.resources.abc is 3.11's
    from importlib.resources.abc import Traversable

DISTRIBUTION = "ntops_prebuilt"
PYTHON_TAG = "cp310"  # the limited API of CPython 3.10 and newer
LIMITED_API = "0x030A0000"
# Compilers must take these; tests add -Werror.
CFLAGS = ("-O2", "-std=gnu11", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra")


def platform_tag(extension: bytes) -> str:
    """The tag of the glibc the extension needs (not the build host's): see manylinux."""
    return manylinux.platform_tag(manylinux.read_needs(extension))


def wheel_name(version: str, tag: str) -> str:
    return f"{DISTRIBUTION}-{version}-{PYTHON_TAG}-abi3-{tag}.whl"


def write_cubins(
    kernels: Sequence[CompiledKernel], directory: pathlib.Path
) -> dict[str, pathlib.Path]:
    """Each kernel's cubin file, by kernel id."""
    return _write_images({kernel.id: kernel.cubin for kernel in kernels}, directory, ".cubin")


def write_ptx(
    kernels: Sequence[CompiledKernel], directory: pathlib.Path
) -> dict[str, pathlib.Path]:
    """Each kernel's PTX file, NUL-terminated as cuModuleLoadData reads text."""
    images = {kernel.id: kernel.ptx.encode() + b"\0" for kernel in kernels}
    return _write_images(images, directory, ".ptx")


def _write_images(
    images: Mapping[str, bytes], directory: pathlib.Path, suffix: str
) -> dict[str, pathlib.Path]:
    """Content-addressed: identical images share a file, unchanged ones are not rewritten."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for kernel_id, image in images.items():
        path = directory / f"{hashlib.sha256(image).hexdigest()}{suffix}"
        if not path.exists():
            write_atomic(path, image)
        paths[kernel_id] = path
    return paths


def include_dirs() -> list[pathlib.Path]:
    """Python's headers and the CUDA driver header that ships inside the triton wheel:
    building needs no CUDA toolkit. (Found without importing triton.)"""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionBuildError("triton is not installed: it provides the CUDA driver header")
    triton = pathlib.Path(next(iter(spec.submodule_search_locations)))
    cuda = triton / "backends" / "nvidia" / "include"
    return [pathlib.Path(sysconfig.get_paths()["include"]), cuda]


def compile_extension(
    sources: Mapping[str, str],
    directory: pathlib.Path,
    cache: Cache | None = None,
    extra_flags: Sequence[str] = (),
) -> pathlib.Path:
    """Write the rendered sources and link them into `_C.abi3.so` in `directory`; a
    library the cache holds for the same sources, command and compiler is reused."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            write_atomic(path, text.encode())
    output = directory / "_C.abi3.so"
    command = [
        compiler(),
        *CFLAGS,
        *extra_flags,
        f"-DPy_LIMITED_API={LIMITED_API}",
        *(f"-I{path}" for path in [*include_dirs(), directory]),
        "-shared",
        "-s",  # no symbol table: it would hold build paths
        *(str(directory / name) for name in sources if name.endswith((".c", ".S"))),
        "-o",
        str(output),
        # libdl.so.2 by name, and kept where glibc >= 2.34 left it empty: before 2.34 it,
        # not libc, holds the dlopen@GLIBC_2.2.5 that driver.c binds to.
        "-Wl,--push-state,--no-as-needed",
        "-l:libdl.so.2",
        "-Wl,--pop-state",
        "-lpthread",
    ]
    key = extension_key(sources, command, compiler_version())
    if cache is not None and cache.has("extensions", key, ".so"):
        shutil.copyfile(cache.path("extensions", key, ".so"), output)
        return output
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
    except FileNotFoundError as error:
        raise ExtensionBuildError(
            f"no C compiler {command[0]!r}: install gcc (or set CC) to build wheels"
        ) from error
    except subprocess.CalledProcessError as error:
        raise ExtensionBuildError(
            f"compiling the launcher failed ({' '.join(command)}):\n{error.stderr}"
        ) from error
    if cache is not None:
        write_atomic(cache.path("extensions", key, ".so"), output.read_bytes())
    return output


def runtime_files() -> dict[str, bytes]:
    """The hand-written part of ntops_prebuilt, shipped as is: aot/runtime's Python files,
    its subpackages' (integrations/) under their folders' names."""
    return dict(sorted(_python_files(importlib.resources.files("ntops_aot.aot") / "runtime")))


def _python_files(folder: Traversable, prefix: str = "") -> Iterator[tuple[str, bytes]]:
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name != "__pycache__":
            yield from _python_files(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(".py"):
            yield f"{prefix}{entry.name}", entry.read_bytes()


def write_wheel(
    extension: pathlib.Path, manifest: Mapping[str, Any], out_dir: pathlib.Path
) -> pathlib.Path:
    version = manifest["version"]
    library = extension.read_bytes()
    tag = platform_tag(library)  # of the library shipped, a cached one included
    files = {f"{DISTRIBUTION}/{name}": data for name, data in runtime_files().items()}
    for name, text in exports.render(manifest).items():  # the Python the kernel files declare
        files[f"{DISTRIBUTION}/{name}"] = text.encode()
    files[f"{DISTRIBUTION}/_C.abi3.so"] = library
    files[f"{DISTRIBUTION}/manifest.json"] = (
        json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    ).encode()
    dist_info = f"{DISTRIBUTION}-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = _metadata(version).encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\n"
        f"Generator: ntops-aot {manifest['toolchain']['ntops-aot']}\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {PYTHON_TAG}-abi3-{tag}\n"
    ).encode()
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in sorted(files.items())]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / wheel_name(version, tag)
    if _record(path) == files[f"{dist_info}/RECORD"]:
        return path  # the same files: the same bytes (nothing in a wheel varies)
    write_atomic(path, archive.zip_bytes(files))
    return path


def _record(path: pathlib.Path) -> bytes | None:
    """The RECORD of an existing wheel at `path`, if there is a readable one."""
    try:
        with zipfile.ZipFile(path) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
            return wheel.read(name)
    except (OSError, zipfile.BadZipFile, StopIteration, KeyError):
        return None


# The oldest torch the runtime works with: torch.library.register_fake (2.4) registers
# the ops. tests/unit/test_oldest_torch.py runs the registration and fake propagation on
# it (`make install` sets up .venv-oldest with torch==OLDEST_TORCH, this minimum's newest
# patch release).
MIN_TORCH = "2.4"


def _metadata(version: str) -> str:
    return (
        "Metadata-Version: 2.1\n"
        "Name: ntops-prebuilt\n"
        f"Version: {version}\n"
        "Summary: Prebuilt ntops kernels with a torch-compatible API (built by ntops-aot)\n"
        "Requires-Python: >=3.10\n"
        # Any torch from MIN_TORCH on: the launcher reads tensors through torch's
        # Python API only, so no torch ABI is baked in.
        f"Requires-Dist: torch>={MIN_TORCH}\n"
    )


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
