"""The op registry, discovered by scanning `ntops_aot.kernels` (never a hand-kept list).

A module there with a `SPACE` is an op; the others hold shared tilings.
"""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import pkgutil
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from ntops_aot.aot import toolchain
from ntops_aot.aot.space import DTYPES, Config, Variant, VariantSpace

KERNELS_PACKAGE = "ntops_aot.kernels"


@dataclasses.dataclass(frozen=True)
class OpDef:
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


def discover(build_dir: pathlib.Path) -> dict[str, OpDef]:
    """Every op under `ntops_aot.kernels`, by name, in sorted order."""
    toolchain.load(build_dir)
    package = importlib.import_module(KERNELS_PACKAGE)
    ops = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{KERNELS_PACKAGE}.{info.name}")
        if isinstance(getattr(module, "SPACE", None), VariantSpace):
            ops[info.name] = OpDef(info.name, module)
    return ops
