"""The op registry, discovered by scanning `ntops_aot.kernels` (never a hand-kept list).

A module there with a `SPACE` is an op; the others hold shared tilings. Planning
needs only each op's `SPACE` (`OpInfo`, which the cache keeps: see
`enumerate.scan`); compiling needs the module itself (`load`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pkgutil
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from ntops_aot.aot import api
from ntops_aot.aot.space import ALL, DTYPES, Config, Tuning, Variant, VariantSpace
from ntops_aot.aot.targets import TARGETS
from ntops_aot.aot.toolchain import Toolchain

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
    # The torch functions the op's kernels serve, as the wheel describes them
    # (`api.describe`): the op's own first.
    apis: tuple[Mapping[str, Any], ...] = ()

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

    def apis(self) -> tuple[dict[str, Any], ...]:
        """The file's `API` (one `Api` or a tuple of them), described for the wheel."""
        declared = getattr(self.module, "API", None)
        if declared is None:
            raise ValueError(
                f"{self.module.__name__}: no API: declare the torch function the op is "
                "beside SPACE (`API = Api(...)`, see aot/api.py and README's Adding an op)"
            )
        declared = declared if isinstance(declared, tuple) else (declared,)
        module = self.module.__name__
        return tuple(api.describe(self.name, one, self.space.switches, module) for one in declared)

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


def read_space(module: str, toolchain: Toolchain) -> VariantSpace | None:
    """Import kernel module `module` and return its `SPACE` (None: not an op)."""
    space = getattr(toolchain.import_module(module), "SPACE", None)
    return space if isinstance(space, VariantSpace) else None


def read_op(module: str, toolchain: Toolchain) -> OpInfo | None:
    """What planning needs of kernel module `module` (None: not an op): its space,
    tuning declaration, and every variant's defaults and candidates, per bucket."""
    space = read_space(module, toolchain)
    if space is None:
        return None
    name = module.rpartition(".")[2]
    op = load(name, toolchain)
    defaults, candidates = {}, {}
    for variant in every_variant(name, space):
        buckets = op.tuning.names if op.tuning else (ALL,)
        defaults[variant.id] = {b: op.config(variant, b) for b in buckets}
        candidates[variant.id] = {b: op.candidates(variant, b) for b in buckets}
    return OpInfo(name, module, space, op.tuning, defaults, candidates, op.apis())


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


def load(name: str, toolchain: Toolchain) -> OpDef:
    """Import op `name`'s kernel file, with `toolchain` loaded."""
    return OpDef(name, toolchain.import_module(f"{KERNELS_PACKAGE}.{name}"))


def load_all(toolchain: Toolchain) -> dict[str, OpDef]:
    """Every op's kernel file, imported, by name (tests and tools; builds use `scan`)."""
    found = {}
    for module in kernel_modules():
        name = module.rpartition(".")[2]
        if read_space(module, toolchain) is not None:
            found[name] = load(name, toolchain)
    return found
