"""ninetoothed below its public surface, in one place, for the version pinned in
pyproject.toml.

Generating a kernel ahead of time needs what `ninetoothed.make` does not hand out: its
code generator (`generation.CodeGenerator`, its call signature and the grid and kernel
definition it leaves behind), the default launch configuration (`utils`), the counter
that names tensors, the names it gives a tensor's pointer, sizes and strides, and its
cache folder (`generation.CACHE_DIR`, made in ~ when the module is imported). Each is
used through `Ninetoothed` only, and `load` refuses any other ninetoothed version than
the pinned one, with the command that installs it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import pathlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from ..errors import ToolchainError
from . import versions

NAME = "ninetoothed"


def check_version() -> None:
    """Raise ToolchainError unless the installed ninetoothed is the pinned one."""
    found, supported = versions.installed(NAME), versions.pinned(NAME)
    if supported is not None and found != supported:
        raise ToolchainError(
            f"ninetoothed {found} is installed; ntops-aot {versions.installed(versions.PROJECT)} "
            f"uses ninetoothed's internals as of {supported} (pinned in its pyproject.toml), "
            f"so it builds with that version only: {sys.executable} -m pip install "
            f"'ninetoothed=={supported}'"
        )


@dataclasses.dataclass(frozen=True)
class Generation:
    """What the code generator made of one application."""

    source: str  # a module holding the kernel, then the Triton helpers it calls
    grid: str | None  # the number of programs, as a Python expression (None: none found)
    kernel_params: tuple[str, ...]  # the kernel's parameters, in order


@dataclasses.dataclass(frozen=True)
class TensorNames:
    """The kernel parameter names ninetoothed gives a tensor."""

    pointer: str
    sizes: tuple[str, ...]
    strides: tuple[str, ...]


class Ninetoothed:
    """The imported ninetoothed, checked: what the toolchain uses of its internals."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._generation = sys.modules[f"{NAME}.generation"]
        self._utils = sys.modules[f"{NAME}.utils"]

    def default_configs(self) -> tuple[int, int]:
        """Warps and stages for a kernel that names none, from the active driver's device."""
        num_warps, num_stages = self._utils.calculate_default_configs()
        return num_warps, num_stages

    def reset_names(self) -> None:
        """Name tensors from zero again: ninetoothed numbers them from a process-wide
        counter, so without this a kernel's source (and cubin) would depend on what was
        generated before it."""
        self._module.Tensor.num_instances = 0

    def names(self, tensor: Any) -> TensorNames:
        return TensorNames(
            tensor.pointer_string(),
            tuple(tensor.size_string(dim) for dim in range(tensor.ndim)),
            tuple(tensor.stride_string(dim) for dim in range(tensor.ndim)),
        )

    def generate(
        self, func: Callable[..., Any], name: str, num_warps: int, num_stages: int
    ) -> Generation:
        """Run the code generator on an annotated application, as `ninetoothed.make`
        does (a torch caller, one configuration, no prettifying)."""
        generator = self._generation.CodeGenerator()
        path = generator(func, "torch", name, num_warps, num_stages, None, False)
        source = pathlib.Path(path).read_text(encoding="utf-8")
        raw = generator.raw_grid
        grid = ast.unparse(raw.body.elts[0]) if raw and isinstance(raw.body, ast.Tuple) else None
        params = tuple(arg.arg for arg in generator.kernel_func.args.args)
        return Generation(source, grid, params)

    @contextlib.contextmanager
    def cache_dir(self, path: pathlib.Path) -> Iterator[None]:
        """Generated sources go to `path` inside the block (the generator writes each
        kernel's source there before reading it back)."""
        path.mkdir(parents=True, exist_ok=True)
        previous, self._generation.CACHE_DIR = self._generation.CACHE_DIR, path
        try:
            yield
        finally:
            self._generation.CACHE_DIR = previous


def load() -> Ninetoothed:
    """ninetoothed (and with it Triton), imported once its version is checked. Its
    import makes a cache folder under HOME, so HOME is a temporary folder meanwhile:
    nothing lands in ~, and importing writes nothing that stays."""
    check_version()
    if f"{NAME}.generation" not in sys.modules:
        with tempfile.TemporaryDirectory(prefix="ntops-aot-home-") as home, _home(home):
            import ninetoothed.generation
    import ninetoothed
    import ninetoothed.generation
    import ninetoothed.utils

    return Ninetoothed(ninetoothed)


@contextlib.contextmanager
def _home(path: str) -> Iterator[None]:
    previous = os.environ.get("HOME")
    os.environ["HOME"] = path
    try:
        yield
    finally:
        if previous is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = previous
