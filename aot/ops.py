"""The op registry, discovered by scanning `ntops_aot.kernels` (never a hand-kept list).

A module there with a `SPACE` is an op; the others hold shared tilings. Planning
needs only each op's `SPACE` (`OpInfo`, which the cache keeps: see
`enumerate.scan`); compiling needs the module itself (`load`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pathlib
import pkgutil
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from ntops_aot.aot import toolchain
from ntops_aot.aot.space import DTYPES, Config, Variant, VariantSpace

KERNELS_PACKAGE = "ntops_aot.kernels"


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """What planning knows of an op: its name, module and variant space."""

    name: str
    module: str
    space: VariantSpace


@dataclasses.dataclass(frozen=True)
class OpDef:
    """An op's kernel file, imported: what a worker compiles from."""

    name: str
    module: ModuleType

    @property
    def space(self) -> VariantSpace:
        return self.module.SPACE

    def config(self, variant: Variant) -> Config:
        """The kernel file's `config(variant)`, or ninetoothed's defaults for the target."""
        choose: Callable[[Variant], Config] | None = getattr(self.module, "config", None)
        return choose(variant) if choose else Config()

    def premake(self, variant: Variant, extra: Mapping[str, int]) -> Any:
        dtype = DTYPES[variant.dtype].triton
        return self.module.premake(variant.ndim, dtype, **dict(variant.switches), **extra)


def kernel_modules() -> list[str]:
    """Every module of the kernels package, sorted, found without importing them."""
    spec = importlib.util.find_spec(KERNELS_PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec else []
    infos = pkgutil.iter_modules(folders)
    return [f"{KERNELS_PACKAGE}.{info.name}" for info in sorted(infos, key=lambda i: i.name)]


def read_space(module: str, toolchain_dir: pathlib.Path) -> VariantSpace | None:
    """Import kernel module `module` and return its `SPACE` (None: not an op)."""
    space = getattr(_import(module, toolchain_dir), "SPACE", None)
    return space if isinstance(space, VariantSpace) else None


def load(name: str, toolchain_dir: pathlib.Path) -> OpDef:
    """Import op `name`'s kernel file, with the toolchain pointed at `toolchain_dir`."""
    return OpDef(name, _import(f"{KERNELS_PACKAGE}.{name}", toolchain_dir))


def _import(module: str, toolchain_dir: pathlib.Path) -> ModuleType:
    toolchain.load(toolchain_dir)
    return importlib.import_module(module)


def load_all(toolchain_dir: pathlib.Path) -> dict[str, OpDef]:
    """Every op's kernel file, imported, by name (tests and tools; builds use `scan`)."""
    found = {}
    for module in kernel_modules():
        name = module.rpartition(".")[2]
        if read_space(module, toolchain_dir) is not None:
            found[name] = load(name, toolchain_dir)
    return found
