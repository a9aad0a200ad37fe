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
from ntops_aot.aot.space import ALL, DTYPES, Config, Tuning, Variant, VariantSpace
from ntops_aot.aot.targets import TARGETS

KERNELS_PACKAGE = "ntops_aot.kernels"


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """What planning knows of an op: its name, module, variant space, tuning
    declaration, and per variant id and bucket its declared default configuration
    and its tuning candidates (every arch's: the cache keeps them with the space)."""

    name: str
    module: str
    space: VariantSpace
    tuning: Tuning | None = None
    defaults: Mapping[str, Mapping[str, Config]] = dataclasses.field(default_factory=dict)
    candidates: Mapping[str, Mapping[str, tuple[Config, ...]]] = dataclasses.field(
        default_factory=dict
    )

    @property
    def buckets(self) -> tuple[str, ...]:
        return self.tuning.names if self.tuning else (ALL,)


@dataclasses.dataclass(frozen=True)
class OpDef:
    """An op's kernel file, imported: what a worker compiles from."""

    name: str
    module: ModuleType

    @property
    def space(self) -> VariantSpace:
        return self.module.SPACE

    @property
    def tuning(self) -> Tuning | None:
        return getattr(self.module, "TUNING", None)

    def config(self, variant: Variant, bucket: str = ALL) -> Config:
        """The kernel file's default: `config(variant, bucket)` for a file with a
        TUNING, `config(variant)` otherwise; ninetoothed's defaults if it has none."""
        choose: Callable[..., Config] | None = getattr(self.module, "config", None)
        if choose is None:
            return Config()
        return choose(variant, bucket) if self.tuning else choose(variant)

    def candidates(self, variant: Variant, bucket: str = ALL) -> tuple[Config, ...]:
        """What a tuning run tries for a bucket: the file's `candidates(variant,
        bucket)`, which must include the default."""
        default = self.config(variant, bucket)
        listed = getattr(self.module, "candidates", None)
        found = tuple(listed(variant, bucket)) if self.tuning and listed else (default,)
        if default.key not in {config.key for config in found}:
            raise ValueError(
                f"{self.name}: candidates({variant.id}, {bucket!r}) leave out the default {default}"
            )
        return found

    def workspace(self, config: Config) -> tuple[int, int]:
        """Bytes of workspace per program, and how many of them the launcher zeroes:
        the kernel file's `workspace(config)`, for ops whose SPACE names a workspace."""
        if self.space.workspace is None:
            return (0, 0)
        found: tuple[int, int] = self.module.workspace(config)
        return found

    @property
    def premake_takes_spec(self) -> bool:
        """A premake with a `spec` parameter generates code per specialisation (e.g.
        TMA for 16-byte aligned operands, plain loads for the others)."""
        import inspect

        return "spec" in inspect.signature(self.module.premake).parameters

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


def read_op(module: str, toolchain_dir: pathlib.Path) -> OpInfo | None:
    """What planning needs of kernel module `module` (None: not an op): its space,
    tuning declaration, and every variant's defaults and candidates, per bucket."""
    space = read_space(module, toolchain_dir)
    if space is None:
        return None
    name = module.rpartition(".")[2]
    op = load(name, toolchain_dir)
    defaults, candidates = {}, {}
    for variant in every_variant(name, space):
        buckets = op.tuning.names if op.tuning else (ALL,)
        defaults[variant.id] = {b: op.config(variant, b) for b in buckets}
        candidates[variant.id] = {b: op.candidates(variant, b) for b in buckets}
    return OpInfo(name, module, space, op.tuning, defaults, candidates)


def every_variant(name: str, space: VariantSpace) -> list[Variant]:
    """Every variant of an op over every arch, as a build of all of them names them."""
    widest = max(space.ndims)
    return [
        Variant(name, arch, dtype, ndim, switches, widest=ndim == widest)
        for arch in TARGETS
        for dtype in space.dtypes
        for ndim in space.ndims
        for switches in space.switch_choices(dtype)
    ]


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
