"""The one door to ninetoothed and Triton: imported here, pointed at the build dir.

Nothing else in the toolchain imports them directly, for two reasons. Importing
ninetoothed creates `~/.ninetoothed` (generation.py makes its cache dir at import)
and Triton caches under `~/.triton`; a build keeps its products under its build
dir and leaves the home directory alone. And with no GPU there is no CUDA driver
for either to ask about the device, so `target_driver` stands one in that
describes the target arch.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from ntops_aot.aot.targets import Target


def load(scratch: pathlib.Path) -> ModuleType:
    """Import ninetoothed (and with it Triton) with their caches under `scratch`."""
    if "ninetoothed" not in sys.modules:
        scratch.mkdir(parents=True, exist_ok=True)
        with _home(scratch):
            import ninetoothed.generation
    import ninetoothed
    import ninetoothed.generation
    import triton

    ninetoothed.generation.CACHE_DIR = scratch / "ninetoothed"
    ninetoothed.generation.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    triton.knobs.cache.dir = str(scratch / "triton")
    # Line tables would embed build paths in every cubin: two machines building the
    # same kernel must produce the same bytes.
    triton.knobs.compilation.disable_line_info = True
    return ninetoothed


@contextlib.contextmanager
def _home(path: pathlib.Path) -> Iterator[None]:
    previous = os.environ.get("HOME")
    os.environ["HOME"] = str(path)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = previous


class _TargetUtils:
    def __init__(self, target: Target) -> None:
        self._target = target

    def get_device_properties(self, device: int) -> dict[str, int]:
        return self._target.device_properties()


class TargetDriver:
    """Answers Triton's and ninetoothed's driver questions for a GPU that is not here."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.utils = _TargetUtils(target)

    def get_current_device(self) -> int:
        # Distinct per target, so caches Triton keys on the device never mix targets.
        return self.target.capability

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.target.capability, self.target.warp_size)


def use_target(target: Target) -> TargetDriver:
    """Make `target` the device Triton and ninetoothed see from now on.

    Not a context manager on purpose: with no GPU, Triton has no driver to go back
    to. A build process describes one target at a time and each job sets its own.
    """
    import triton

    driver = TargetDriver(target)
    triton.runtime.driver.set_active(driver)
    return driver
