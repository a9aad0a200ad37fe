"""The op registry, discovered by scanning `ntops_aot.kernels` (never a hand-kept list).

A module there with a `SPACE` is an op; its packages (`_lib`: kernel code ops share,
`tuning`: tuning policy and tables) are not scanned. Planning needs only each op's
`SPACE` (`OpInfo`, which the cache keeps: see `enumerate.scan`); compiling needs the
module itself (`load`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pkgutil
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from ..errors import UnsupportedKernel
from ..toolchain.compilers import Toolchain
from ..toolchain.targets import TARGETS
from . import api
from .arguments import Arg, arguments, own_dtype, parameters
from .dims import named_dims
from .limits import NT_MAX_ARGS, NT_MAX_DIMS
from .plain import Plain
from .space import ALL, DTYPES, Config, Spec, Tuning, Variant, VariantSpace, group_key

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

    @property
    def aliases(self) -> tuple[str, ...]:
        """The generated functions of other names that call the op's kernels (eq, ne,
        ... of `comparison`): each gets launcher groups of its own name, over the op's
        kernels, so that what a call gets back names the function it made."""
        return tuple(
            api["name"] for api in self.apis if api["wrapper"] is None and api["name"] != self.name
        )


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

    def unit_dims(self, variant: Variant) -> Mapping[str, tuple[int, ...]]:
        """The dims of each tensor that `variant`'s kernels may specialise to stride 1:
        the kernel file's `unit_dims(variant)` where a switch moves them (a layout that
        reads another dim contiguously), else SPACE.unit_dims."""
        choose: Callable[..., Mapping[str, tuple[int, ...]]] | None = getattr(
            self.module, "unit_dims", None
        )
        return self.space.unit_dims if choose is None else choose(variant)

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
                "beside SPACE (`API = Api(...)`, see aot/declare/api.py and README's Adding an op)"
            )
        declared = declared if isinstance(declared, tuple) else (declared,)
        module = self.module.__name__
        return tuple(api.describe(self.name, one, self.space.switches, module) for one in declared)

    def plain(self, variant: Variant, config: Config, spec: Spec) -> Plain | None:
        """The hand-written kernel the file's `plain(variant, config, spec)` gives for a
        specialisation (declare/plain.py), or None: ninetoothed generates it."""
        choose: Callable[..., Plain | None] | None = getattr(self.module, "plain", None)
        return None if choose is None else choose(variant, config, spec)

    @property
    def premake_takes_spec(self) -> bool:
        """A premake with a `spec` parameter generates code per specialisation (e.g.
        TMA for 16-byte aligned operands, plain loads for the others)."""
        import inspect

        return "spec" in inspect.signature(self.module.premake).parameters

    def premake(self, variant: Variant, config: Config, spec: Spec | None = None) -> Any:
        """The file's `premake(ndim, dtype, **switches, **config)` for `variant`:
        (arrangement, application, tensors). `spec` reaches premakes that take it, a
        split configuration's parts as `split`."""
        extra: dict[str, Any] = dict(config.premake)
        if self.premake_takes_spec:
            extra["spec"] = spec
        if config.split > 1:
            extra["split"] = config.split
        dtype = DTYPES[variant.dtype].triton
        return self.module.premake(variant.ndim, dtype, **dict(variant.switches), **extra)

    def arguments(self, variant: Variant, config: Config) -> tuple[Arg, ...]:
        """What a call of `variant`'s kernels passes (the same for every spec)."""
        _, application, tensors = self.premake(variant, config)
        return arguments(self.name, self.space, parameters(application), tensors)


def kernel_modules() -> list[str]:
    """Every module of the kernels package, sorted, found without importing them.
    Packages are skipped: `kernels/_lib` (shared kernel code) and `kernels/tuning`
    (tuning policy and tables) hold no op, and their modules are not kernel files."""
    spec = importlib.util.find_spec(KERNELS_PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec else []
    infos = [info for info in pkgutil.iter_modules(folders) if not info.ispkg]
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
    apis = op.apis()
    check(op, defaults)
    return OpInfo(name, module, space, op.tuning, defaults, candidates, apis)


def check(op: OpDef, defaults: Mapping[str, Mapping[str, Config]]) -> None:
    """What the launcher will need of `op`'s kernels, checked on its declarations
    before anything compiles: per group (switch values), the arguments of every dtype
    and ndim within the launcher's limits, of one count, each tensor's dtype rule, the
    named dims (SPACE.dims) and the tuning's bucket keys. Raises UnsupportedKernel
    naming the kernel file."""
    generated = [described for described in op.apis() if described["wrapper"] is None]
    try:
        for switches, variants in _groups(op.name, op.space).items():
            key = group_key(op.name, switches)
            calls = [(v, op.arguments(v, next(iter(defaults[v.id].values())))) for v in variants]
            _check_group(op, key, dict(switches), calls)
            _check_passed(generated, key, calls[0][1])
    except UnsupportedKernel as error:
        raise UnsupportedKernel(f"{op.module.__name__}: {error}") from error


def _groups(name: str, space: VariantSpace) -> dict[tuple[tuple[str, str], ...], list[Variant]]:
    """One arch's variants (arguments do not depend on the arch), by switch values."""
    first = next(arch for arch in TARGETS if space.builds_for(arch))
    found: dict[tuple[tuple[str, str], ...], list[Variant]] = {}
    for variant in every_variant(name, space):
        if variant.arch == first:
            found.setdefault(variant.switches, []).append(variant)
    return found


def _check_group(
    op: OpDef, key: str, switches: Mapping[str, str], calls: list[tuple[Variant, tuple[Arg, ...]]]
) -> None:
    counts = {len(args) for _, args in calls}
    if len(counts) > 1:
        raise UnsupportedKernel(f"{key}: its variants take {sorted(counts)} arguments")
    widest = max(arg.ndim for _, args in calls for arg in args)
    if counts.pop() > NT_MAX_ARGS or widest > NT_MAX_DIMS:
        raise UnsupportedKernel(
            f"{key}: {len(calls[0][1])} arguments of up to {widest} dims; the launcher "
            f"takes at most {NT_MAX_ARGS} of {NT_MAX_DIMS}"
        )
    kinds = [(DTYPES[variant.dtype].triton, args) for variant, args in calls]
    for index in range(len(calls[0][1])):
        own_dtype(key, index, kinds)
    for _, args in calls:
        named_dims(key, op.space.coalesce, args, switches)
    for name, dim in op.tuning.keys if op.tuning else ():
        for _, args in calls:
            arg = next((arg for arg in args if arg.name == name), None)
            if arg is None or not -arg.ndim <= dim < 0:
                raise UnsupportedKernel(
                    f"{key}: TUNING key {(name, dim)} is not a negative dim of an argument"
                )


def _check_passed(generated: list[dict[str, Any]], key: str, args: tuple[Arg, ...]) -> None:
    """A generated function (described, without a wrapper) passes its kernel the
    parameters its API names, bound ones included, in the application's order: the
    launcher reads them by position."""
    expected = [arg.name for arg in args if not arg.output]
    for described in generated:
        if described["kernel"] != expected:
            raise UnsupportedKernel(
                f"{key}: {described['name']} passes its kernel {described['kernel']}, but the "
                f"application takes {expected} (and its outputs): name them alike, or "
                "give Api(kernel=...) or Api(bound=...)"
            )


def every_variant(name: str, space: VariantSpace) -> list[Variant]:
    """Every variant of an op over every arch, as a build of all of them names them."""
    widest = max(space.ndims)
    return [
        Variant(name, arch, dtype, ndim, switches, widest=ndim == widest)
        for arch in TARGETS
        if space.builds_for(arch)
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
