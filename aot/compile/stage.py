"""Stage 3, compile: a plan -> its variants' compiled kernels.

The cache is the store of compiled kernels: a variant whose key it holds is not
compiled again. The others compile in worker processes (`workers.run`), each with its
own `Toolchain`, which store every variant as it finishes, so a build that is killed
resumes where it stopped. The result is data (`Compiled`): what a shard file holds and
what the package stage takes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from collections.abc import Callable, Mapping, Sequence

from ..declare.space import Variant
from ..errors import VariantFailure, VariantsFailed
from ..plan.builds import CompileOptions
from ..plan.stage import Plan, reproduce
from ..store.cache import Cache, write_atomic
from ..toolchain import ninetoothed_adapter
from ..toolchain.compilers import Toolchain
from . import workers
from .cubins import CompiledKernel
from .variant import Task, compile_variant


@dataclasses.dataclass(frozen=True)
class Compiled:
    """The compiled kernels of a plan's variants, and the variants that failed."""

    kernels: Mapping[str, tuple[CompiledKernel, ...]]  # variant id -> its kernels
    failures: tuple[VariantFailure, ...] = ()  # in the plan's order
    compiled: int = 0  # variants this run compiled (the store held the others)

    def flat(self, variants: Sequence[Variant]) -> tuple[CompiledKernel, ...]:
        """The kernels of `variants`, in their order."""
        return tuple(kernel for v in variants for kernel in self.kernels.get(v.id, ()))

    def check(self, planned: Plan) -> None:
        """Raise VariantsFailed if a variant failed, unless the build keeps going."""
        if self.failures and not planned.options.keep_going:
            raise VariantsFailed(self.failures, len(planned.variants))


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


def compile_all(planned: Plan, progress: Progress | None = None) -> Compiled:
    """Every planned variant's kernels, from the store or compiled (and stored)."""
    cache = Cache(planned.options.cache_root)
    for key, entry in planned.learned.items():
        cache.store("ops", key, entry)
    kernels: dict[str, tuple[CompiledKernel, ...]] = {}
    todo = []
    for variant in planned.variants:
        entry = cache.load("kernels", planned.keys[variant.id])
        if entry is None:
            todo.append(variant)
            continue
        kernels[variant.id] = tuple(entry)
        if progress:
            progress(Event(len(kernels), len(planned.variants), variant, 0.0, cached=True))
    if todo:
        # Refused once here, rather than by every worker for every variant.
        ninetoothed_adapter.check_version()
    tracker = _Tracker(planned, cache, kernels, progress)
    try:
        _run(planned, cache, tracker.order(todo), tracker)
    finally:
        tracker.timings.save()
    order = {variant.id: index for index, variant in enumerate(planned.variants)}
    failures = sorted(tracker.failures, key=lambda failure: order[failure.variant])
    return Compiled(kernels, tuple(failures), len(todo) - len(failures))


def _run(planned: Plan, cache: Cache, todo: Sequence[Variant], tracker: _Tracker) -> None:
    options = planned.options
    tasks = [Task(v, planned.keys[v.id], planned.builds[v.id]) for v in todo]
    start = functools.partial(_start_worker, options=planned.compile_options, cache_root=cache.root)
    memory = options.max_memory * 2**20 if options.max_memory else None
    count = min(options.jobs, len(tasks)) or 1
    workers.run(tasks, start, count, options.timeout, memory, tracker)


def _start_worker(options: CompileOptions, cache_root: pathlib.Path) -> workers.Work:
    """In a new worker: its one toolchain, and the work it does with it."""
    cache = Cache(cache_root)
    toolchain = Toolchain(cache.toolchain_dir)
    return functools.partial(_compile_and_store, toolchain=toolchain, options=options, cache=cache)


def _compile_and_store(
    task: Task, toolchain: Toolchain, options: CompileOptions, cache: Cache
) -> list[CompiledKernel]:
    """In a worker: compile one variant and store it, so a killed build keeps it. (A
    CompileError is reported with the variant's reproducer, `plan.reproduce`.)"""
    kernels = compile_variant(toolchain, task.variant, options, task.builds)
    cache.store("kernels", task.key, kernels)
    return kernels


class _Tracker:
    """What the workers report, gathered in the parent: kernels, failures, timings,
    and the progress events with an estimate of the time left."""

    def __init__(
        self,
        planned: Plan,
        cache: Cache,
        kernels: dict[str, tuple[CompiledKernel, ...]],
        progress: Progress | None,
    ) -> None:
        self.planned, self.kernels, self.progress = planned, kernels, progress
        self.failures: list[VariantFailure] = []
        self.timings = _Timings(cache.root / "timings.json")
        self.left: dict[str, float] = {}

    def order(self, todo: list[Variant]) -> list[Variant]:
        """Longest first (as last time), so that no long variant starts last."""
        self.left = {variant.id: self.timings.get(variant.id) for variant in todo}
        return sorted(todo, key=lambda variant: -self.left[variant.id])

    def __call__(
        self, task: Task, result: list[CompiledKernel] | workers.Failure, seconds: float
    ) -> None:
        variant, failure = task.variant, None
        if isinstance(result, workers.Failure):
            command = reproduce(variant, self.planned.options)
            failure = VariantFailure(variant.id, result.kind, result.message, command)
            self.failures.append(failure)
        else:
            self.kernels[variant.id] = tuple(result)
            self.timings.set(variant.id, seconds)
        self.left.pop(variant.id, None)
        if self.progress:
            done, total = len(self.kernels) + len(self.failures), len(self.planned.variants)
            estimate = self.estimate()
            self.progress(Event(done, total, variant, seconds, False, failure, estimate))

    def estimate(self) -> float:
        """Seconds of compiling left: each variant's last time (or the seed's), spread
        over the workers."""
        left = self.left.values()
        return sum(left) / min(self.planned.options.jobs, max(len(left), 1))


# What the slow variants took in a cold sm_90 build on a 2-core machine, by id less its
# arch: the order of a build with no timings of its own (a cold cache), so that its
# longest variants start first there too. Refreshed from a build's timings.json with
# `python -m ntops_aot.aot.compile.stage CACHE_DIR/timings.json`.
SEED = pathlib.Path(__file__).with_name("seconds.json")
_SEEDED = 1.0  # seconds: faster variants are left out of the seed


def _unarched(variant: str) -> str:
    op, _, rest = variant.partition("-")
    return f"{op}-{rest.partition('-')[2]}"


class _Timings:
    """How long each variant took to compile last time (else, in a cold cache, the
    seed's figure): for ordering and the ETA."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        try:
            self.seconds: dict[str, float] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.seconds = {}
        try:
            self.seed: dict[str, float] = json.loads(SEED.read_text())
        except (OSError, ValueError):
            self.seed = {}
        self.changed = False
        known = self.seconds.values()
        self.typical = sum(known) / len(known) if known else 1.0

    def get(self, variant: str) -> float:
        """Its last time, else the seed's figure, else (a variant the seed leaves out as
        fast) at most the seed's threshold."""
        found = self.seconds.get(variant)
        if found is None:
            found = self.seed.get(_unarched(variant), min(self.typical, _SEEDED))
        return found

    def set(self, variant: str, seconds: float) -> None:
        self.seconds[variant] = round(seconds, 2)
        self.changed = True

    def save(self) -> None:
        if self.changed:
            text = json.dumps(self.seconds, sort_keys=True, indent=0)
            write_atomic(self.path, text.encode())


if __name__ == "__main__":  # refresh the seed from a build's timings (see SEED)
    import sys

    timings = json.loads(pathlib.Path(sys.argv[1]).read_text())
    seed = {_unarched(v): s for v, s in sorted(timings.items()) if s >= _SEEDED}
    SEED.write_text(json.dumps(seed, indent=0, sort_keys=True) + "\n")
    print(f"{SEED}: {len(seed)} variants of {_SEEDED} s or more")
