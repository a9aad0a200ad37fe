"""The pipeline end to end: plan -> compile (cached, in workers) -> package.

Planning (`plan`) is pure: the ops, the variants and each variant's cache key.
Compiling runs only the variants whose key is not in the cache, in worker processes
(`workers.run`) that store each result as it finishes, so a build that is killed
resumes where it stopped. Packaging renders the launcher, compiles it (cached by
its sources) and writes the wheel(s); only this last stage writes outside the cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata

from ntops_aot.aot import cache as caching
from ntops_aot.aot import enumerate as enumeration
from ntops_aot.aot import jobs, package, shards, tuning, workers
from ntops_aot.aot import ops as registry
from ntops_aot.aot.compile import CompiledKernel
from ntops_aot.aot.config import BuildOptions
from ntops_aot.aot.errors import (
    PARTIAL_EXIT_CODE,
    BuildError,
    CompileError,
    UsageError,
    VariantFailure,
    VariantsFailed,
)
from ntops_aot.aot.manifest import manifest
from ntops_aot.aot.ops import OpInfo
from ntops_aot.aot.render import GroupDef, render_extension
from ntops_aot.aot.space import Variant, group_key
from ntops_aot.aot.targets import TARGETS


@dataclasses.dataclass(frozen=True)
class Plan:
    options: BuildOptions
    ops: Mapping[str, OpInfo]  # every op: the wheel's registry names them all
    names: tuple[str, ...]  # the ops selected
    variants: tuple[Variant, ...]  # the variants selected (this shard's, with --shard)
    keys: Mapping[str, str]  # variant id -> cache key of its kernels
    choices: Mapping[str, Mapping[str, tuning.Choice]]  # variant id -> bucket -> config
    builds: Mapping[str, tuple[jobs.Build, ...]]  # variant id -> what it compiles

    @property
    def compile_options(self) -> jobs.CompileOptions:
        return jobs.CompileOptions(self.options.num_warps, self.options.num_stages)


@dataclasses.dataclass(frozen=True)
class Event:
    """One variant done: from the cache, compiled, or failed."""

    done: int
    total: int
    variant: Variant
    seconds: float
    cached: bool
    failure: VariantFailure | None = None
    estimate: float = 0.0  # seconds of compiling left, over all workers


Progress = Callable[[Event], None]


@dataclasses.dataclass(frozen=True)
class BuildResult:
    outputs: tuple[pathlib.Path, ...]  # the wheel, then per-arch wheels; or the shard file
    variants: tuple[Variant, ...]
    kernels: tuple[CompiledKernel, ...]
    failures: tuple[VariantFailure, ...]
    compiled: int  # variants compiled by this build (the rest came from the cache)
    seconds: float

    @property
    def wheel(self) -> pathlib.Path:
        return self.outputs[0]

    @property
    def exit_code(self) -> int:
        return PARTIAL_EXIT_CODE if self.failures else 0


def plan(options: BuildOptions, environ: Mapping[str, str] | None = None) -> Plan:
    """What `options` builds, and under which keys; imports kernel files only when
    the cache has not seen them."""
    cache = caching.Cache(options.cache_root)
    keys = caching.Keys(os.environ if environ is None else environ)
    ops = enumeration.scan(cache, keys)
    names = enumeration.select_ops(ops, options.ops)
    if options.candidates:
        names = _tunable(ops, names, options.ops)
    arches = enumeration.select_arches(options.arches)
    variants = enumeration.variants(
        ops, names, arches, options.dtypes, options.ndims, options.variants
    )
    if options.shard is not None:
        variants = [v for v in variants if shard_of(v, options.shard[1]) == options.shard[0]]
    tables = _tables(options, ops, arches, keys.toolchain)
    choices = {
        v.id: tuning.resolve(
            v,
            ops[v.op].tuning,
            ops[v.op].defaults[v.id],
            ops[v.op].candidates[v.id],
            tables.get(v.arch),
        )
        for v in variants
    }
    builds = {
        v.id: tuning.candidate_builds(ops[v.op].tuning, ops[v.op].candidates[v.id])  # type: ignore[arg-type]
        if options.candidates
        else tuning.builds(ops[v.op].tuning, choices[v.id], ops[v.op].defaults[v.id])
        for v in variants
    }
    compile_options = dataclasses.asdict(jobs.CompileOptions(options.num_warps, options.num_stages))
    variant_keys = {
        v.id: keys.variant(v, ops[v.op].module, compile_options, builds[v.id]) for v in variants
    }
    return Plan(options, ops, tuple(names), tuple(variants), variant_keys, choices, builds)


def _tunable(ops: Mapping[str, OpInfo], names: Sequence[str], asked: Sequence[str]) -> list[str]:
    """The ops a tuning wheel holds: those of `names` that declare a TUNING."""
    tunable = [name for name in names if ops[name].tuning is not None]
    named = [name for name in names if name in asked and ops[name].tuning is None]
    if named or not tunable:
        every = ", ".join(name for name in ops if ops[name].tuning is not None)
        raise UsageError(
            f"{', '.join(named) or 'these ops'}: no TUNING declared; ops that tune: {every}"
        )
    return tunable


def _tables(
    options: BuildOptions,
    ops: Mapping[str, OpInfo],
    arches: Sequence[str],
    toolchain: Mapping[str, str],
) -> dict[str, tuning.Table]:
    """The tuning tables in force, checked against this toolchain and the kernel files."""
    if options.candidates or not options.tuning:
        return {}
    tables = tuning.load_tables(options.tuning_dir or tuning.tables_dir(), arches)
    for arch, table in tables.items():
        tuning.check_toolchain(table, toolchain)
        known = [
            variant.id
            for name, op in ops.items()
            for variant in registry.every_variant(name, op.space)
            if variant.arch == arch
        ]
        tuning.check_variants(table, known)
    return tables


def shard_of(variant: Variant, shards: int) -> int:
    """The shard (1..shards) a variant belongs to: a hash of its id, so a variant stays
    in its shard whatever else is added to the build."""
    return int(hashlib.sha256(variant.id.encode()).hexdigest()[:16], 16) % shards + 1


def build(options: BuildOptions, progress: Progress | None = None) -> BuildResult:
    """Compile what the cache lacks and write the wheel(s), or with --shard the shard
    file. Raises VariantsFailed if a variant failed, unless options.keep_going."""
    start = time.perf_counter()
    planned = plan(options)
    kernels, failures, compiled = compile_all(planned, progress)
    if failures and not options.keep_going:
        raise VariantsFailed(failures, len(planned.variants))
    if options.shard is not None:
        outputs: tuple[pathlib.Path, ...] = (
            shards.write_shard(options, planned.keys, kernels, failures),
        )
    else:
        outputs = write_wheels(planned, kernels, failures)
    flat = tuple(k for v in planned.variants for k in kernels.get(v.id, ()))
    return BuildResult(
        outputs, planned.variants, flat, tuple(failures), compiled, time.perf_counter() - start
    )


def compile_all(
    planned: Plan, progress: Progress | None = None
) -> tuple[dict[str, list[CompiledKernel]], list[VariantFailure], int]:
    """Every planned variant's kernels (by id), the failures, and how many compiled."""
    options, cache = planned.options, caching.Cache(planned.options.cache_root)
    kernels: dict[str, list[CompiledKernel]] = {}
    total, todo = len(planned.variants), []
    for variant in planned.variants:
        entry = cache.load("kernels", planned.keys[variant.id])
        if entry is None:
            todo.append(variant)
            continue
        kernels[variant.id] = entry
        if progress:
            progress(Event(len(kernels), total, variant, 0.0, cached=True))
    timings = _Timings(cache.root / "timings.json")
    # Longest first (as last time), so that no long variant starts last.
    todo.sort(key=lambda variant: -timings.get(variant.id))
    failures: list[VariantFailure] = []
    # Seconds each variant left should take: last build's time, else (cold cache) the
    # mean of what this build has compiled so far.
    left = {variant.id: timings.seconds.get(variant.id) for variant in todo}
    spent: list[float] = []

    def report(task: jobs.Task, result: object, seconds: float) -> None:
        variant = task.variant
        failure = None
        if isinstance(result, workers.Failure):
            failure = VariantFailure(
                variant.id, result.kind, result.message, reproduce(variant, options)
            )
            failures.append(failure)
        else:
            kernels[variant.id] = result  # type: ignore[assignment]
            timings.set(variant.id, seconds)
            spent.append(seconds)
        left.pop(variant.id, None)
        if progress:
            done = len(kernels) + len(failures)
            typical = sum(spent) / len(spent) if spent else timings.typical
            known = [s if s is not None else typical for s in left.values()]
            estimate = sum(known) / min(options.jobs, max(len(known), 1))
            progress(Event(done, total, variant, seconds, False, failure, estimate))

    work = functools.partial(
        _compile_and_store, options=planned.compile_options, cache_root=cache.root
    )
    try:
        tasks = [
            jobs.Task(variant, planned.keys[variant.id], planned.builds[variant.id])
            for variant in todo
        ]
        memory = options.max_memory * 2**20 if options.max_memory else None
        workers.run(
            tasks, work, min(options.jobs, len(tasks)) or 1, options.timeout, memory, report
        )
    finally:
        timings.save()
    order = {variant.id: index for index, variant in enumerate(planned.variants)}
    failures.sort(key=lambda failure: order[failure.variant])
    return kernels, failures, len(todo) - len(failures)


def _compile_and_store(
    task: jobs.Task, options: jobs.CompileOptions, cache_root: pathlib.Path
) -> list[CompiledKernel]:
    """In a worker: compile one variant and store it, so a killed build keeps it."""
    cache = caching.Cache(cache_root)
    try:
        kernels = jobs.compile_variant(task.variant, options, cache.toolchain_dir, task.builds)
    except CompileError as error:
        # The failure is reported with the variant's reproducer (`reproduce`).
        raise BuildError(f"{error.kernel_id}: {error.reason}") from None
    cache.store("kernels", task.key, kernels)
    return kernels


def reproduce(variant: Variant, options: BuildOptions) -> str:
    """A command that builds `variant` alone, as this build would."""
    words = ["ntops-aot", "build", "--arch", variant.arch, "--ops", variant.op]
    if options.ndims:
        words += ["--ndims", ",".join(map(str, options.ndims))]
    words += ["--variants", variant.id, "--jobs", "1"]
    for name in ("num_warps", "num_stages"):
        if getattr(options, name) is not None:
            words += [f"--{name.replace('_', '-')}", str(getattr(options, name))]
    return " ".join(words)


def write_wheels(
    planned: Plan,
    kernels: Mapping[str, Sequence[CompiledKernel]],
    failures: Sequence[VariantFailure],
) -> tuple[pathlib.Path, ...]:
    """The wheel of every planned variant, and with --wheel-per-arch one per arch. A
    tuning wheel (every candidate) is versioned `+tuning`."""
    main = "tuning" if planned.options.candidates else None
    wheels = [_write_wheel(planned, planned.variants, kernels, failures, local=main)]
    arches = sorted({v.arch for v in planned.variants}, key=list(TARGETS).index)
    if planned.options.wheel_per_arch:
        for arch in arches:
            mine = tuple(v for v in planned.variants if v.arch == arch)
            failed = [f for f in failures if f.variant in {v.id for v in mine}]
            wheels.append(_write_wheel(planned, mine, kernels, failed, local=arch.replace("_", "")))
    return tuple(wheels)


def _write_wheel(
    planned: Plan,
    variants: Sequence[Variant],
    kernels: Mapping[str, Sequence[CompiledKernel]],
    failures: Sequence[VariantFailure],
    local: str | None,
) -> pathlib.Path:
    options, cache = planned.options, caching.Cache(planned.options.cache_root)
    flat = [k for v in variants for k in kernels.get(v.id, ())]
    groups = [
        GroupDef(
            group_key(name, switches),
            name,
            op.space.coalesce,
            op.space.allows_in_place,
            op.tuning.keys if op.tuning else (),
        )
        for name, op in planned.ops.items()
        for switches in op.space.all_switch_choices()
    ]
    cubins = package.write_cubins(flat, options.build_dir / "cubins")
    shipped = ptx_kernels(flat) if options.ptx else []
    ptx = package.write_ptx(shipped, options.build_dir / "cubins")
    sources = render_extension(flat, groups, cubins, ptx)
    folder = options.build_dir / "extension" / (local or "all")
    extension = package.compile_extension(sources, folder, cache)
    version = metadata.version("ntops-aot") + (f"+{local}" if local else "")
    contents = manifest(
        version=version,
        toolchain=package.toolchain_versions(),
        options=options,
        ops=planned.ops,
        names=planned.names,
        variants=variants,
        kernels=kernels,
        failures=failures,
        ptx=ptx,
        choices=planned.choices,
    )
    return package.write_wheel(extension, contents, options.out_dir)


def ptx_kernels(kernels: Sequence[CompiledKernel]) -> list[CompiledKernel]:
    """What --ptx ships: the kernels of the newest arch with portable PTX. PTX of an
    arch-specific target (sm_90a, sm_100a, sm_120a) runs only where its cubin does."""
    portable = [kernel for kernel in kernels if not kernel.target.endswith("a")]
    newest = max((TARGETS[kernel.variant.arch].capability for kernel in portable), default=None)
    return [kernel for kernel in portable if TARGETS[kernel.variant.arch].capability == newest]


class _Timings:
    """How long each variant took to compile last time: for ordering and the ETA."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        try:
            self.seconds: dict[str, float] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.seconds = {}
        self.changed = False
        known = self.seconds.values()
        self.typical = sum(known) / len(known) if known else 1.0

    def get(self, variant: str) -> float:
        return self.seconds.get(variant, self.typical)

    def set(self, variant: str, seconds: float) -> None:
        self.seconds[variant] = round(seconds, 2)
        self.changed = True

    def save(self) -> None:
        if self.changed:
            text = json.dumps(self.seconds, sort_keys=True, indent=0)
            caching.write_atomic(self.path, text.encode())
