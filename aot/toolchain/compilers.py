"""The one door to ninetoothed and Triton: a `Toolchain` per process that compiles.

Nothing else imports them. A toolchain is made with its scratch folder (where Triton
and ninetoothed keep their caches: a build keeps its products under its build dir and
leaves ~ alone) and imports them on first use, through the ninetoothed adapter, which
checks ninetoothed's version. With no GPU there is no CUDA driver for either to ask
about the device: `Toolchain.target` stands one in that describes the target arch.

Triton and ninetoothed keep their settings in module globals. A toolchain sets them
only inside `with toolchain.target(...)`, and puts back what was there when the block
ends, so toolchains never see each other's folders, and nothing has to be set up
before anything else: code generation and compilation enter the block themselves.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import pathlib
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from . import ninetoothed_adapter
from .ninetoothed_adapter import Ninetoothed
from .targets import Target


class Toolchain:
    def __init__(self, scratch: pathlib.Path) -> None:
        self.scratch = scratch  # nothing is made there until a kernel is generated

    @functools.cached_property
    def sources(self) -> pathlib.Path:
        """Where ninetoothed writes each generated kernel's source before it is read back:
        a folder of this toolchain's own, removed with it. ninetoothed writes a source
        only where its file does not exist yet, so in a folder shared with another
        process (two builds on one cache, two workers) a reader could meet a file that
        is still being written."""
        parent = self.scratch / "ninetoothed"
        parent.mkdir(parents=True, exist_ok=True)
        folder = pathlib.Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))
        weakref.finalize(self, shutil.rmtree, folder, True)
        return folder

    @functools.cached_property
    def ninetoothed(self) -> Ninetoothed:
        """ninetoothed, imported (and checked) on first use."""
        return ninetoothed_adapter.load()

    @functools.cached_property
    def triton(self) -> ModuleType:
        self.ninetoothed  # noqa: B018 - imports Triton the way ninetoothed does, checked first
        import triton
        import triton.backends.compiler
        import triton.backends.nvidia.compiler
        import triton.compiler

        return triton

    def import_module(self, name: str) -> ModuleType:
        """Import a kernel file (which imports ninetoothed) with the toolchain loaded."""
        self.ninetoothed  # noqa: B018 - checked and imported before the kernel file does
        return importlib.import_module(name)

    def gpu_target(self, target: Target) -> Any:
        """Triton's description of `target`."""
        return self.triton.backends.compiler.GPUTarget("cuda", target.capability, target.warp_size)

    def cubin_arch(self, target: Target) -> str:
        """What a cubin for `target` runs on, as Triton names it ("sm_90a")."""
        return str(self.triton.backends.nvidia.compiler.sm_arch_from_capability(target.capability))

    @contextlib.contextmanager
    def target(self, target: Target) -> Iterator[TargetDriver]:
        """Inside the block, Triton and ninetoothed see `target` as the device and keep
        their caches in this toolchain's scratch folder."""
        triton = self.triton
        driver = TargetDriver(target, self.gpu_target(target))
        # Triton's knobs write os.environ too; `scope` puts both back.
        with (
            triton.knobs.cache.scope(),
            triton.knobs.compilation.scope(),
            self.ninetoothed.cache_dir(self.sources),
        ):
            triton.knobs.cache.dir = str(self.scratch / "triton")
            # Line tables would embed build paths in every cubin: two machines building
            # the same kernel must produce the same bytes.
            triton.knobs.compilation.disable_line_info = True
            # Left active after the block: Triton has no public way back to "no driver"
            # on a machine without a GPU, and every block sets its own.
            triton.runtime.driver.set_active(driver)
            yield driver


class _TargetUtils:
    def __init__(self, target: Target) -> None:
        self._target = target

    def get_device_properties(self, device: int) -> dict[str, int]:
        return self._target.device_properties()


class TargetDriver:
    """Answers Triton's and ninetoothed's driver questions for a GPU that is not here."""

    def __init__(self, target: Target, gpu_target: Any) -> None:
        self.target = target
        self.utils = _TargetUtils(target)
        self._gpu_target = gpu_target

    def get_current_device(self) -> int:
        # Distinct per target, so caches Triton keys on the device never mix targets.
        return self.target.capability

    def get_current_target(self) -> Any:
        return self._gpu_target
