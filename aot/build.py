"""A build, end to end: three stages over data.

    plan(options) -> Plan                     what to make, and each variant's key (plan/)
    compile_all(plan) -> Compiled             from the store (the cache) or compiled in
                                              workers, and stored (compile/)
    write_wheels(plan, compiled) -> wheels    the package stage (package/)

With --shard, the last stage is `shards.write` instead: a shard file is the Compiled of
this shard's variants, serialised; `merge` unions the shards' and calls `write_wheels`.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

from .compile.cubins import CompiledKernel
from .compile.stage import Compiled, Progress, compile_all
from .config import BuildOptions
from .declare.space import Variant
from .errors import PARTIAL_EXIT_CODE, VariantFailure
from .package import shards
from .package.stage import write_wheels
from .plan.stage import Plan, plan


@dataclasses.dataclass(frozen=True)
class BuildResult:
    outputs: tuple[pathlib.Path, ...]  # the wheel, then per-arch wheels; or the shard file
    variants: tuple[Variant, ...]
    kernels: tuple[CompiledKernel, ...]
    failures: tuple[VariantFailure, ...]
    compiled: int  # variants compiled by this build (the rest came from the cache)
    seconds: float

    @classmethod
    def of(
        cls, outputs: tuple[pathlib.Path, ...], planned: Plan, compiled: Compiled, start: float
    ) -> BuildResult:
        """What a build or merge that started at `start` (perf_counter) wrote."""
        kernels = compiled.flat(planned.variants)
        seconds = time.perf_counter() - start
        return cls(
            outputs, planned.variants, kernels, compiled.failures, compiled.compiled, seconds
        )

    @property
    def wheel(self) -> pathlib.Path:
        return self.outputs[0]

    @property
    def exit_code(self) -> int:
        return PARTIAL_EXIT_CODE if self.failures else 0


def build(options: BuildOptions, progress: Progress | None = None) -> BuildResult:
    """Compile what the cache lacks and write the wheel(s), or with --shard the shard
    file. Raises VariantsFailed if a variant failed, unless options.keep_going."""
    start = time.perf_counter()
    planned = plan(options)
    compiled = compile_all(planned, progress)
    compiled.check(planned)
    if options.shard is not None:
        outputs: tuple[pathlib.Path, ...] = (shards.write(planned, compiled),)
    else:
        outputs = write_wheels(planned, compiled)
    return BuildResult.of(outputs, planned, compiled, start)
