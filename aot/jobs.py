"""One unit of work: a variant -> its compiled kernels (stages 2 and 3), run in a
worker process. The closure of this module's imports is part of every kernel's
cache key (see cache.COMPILER_MODULES): what it runs is what the key covers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ntops_aot.aot import codegen, ops
from ntops_aot.aot.compile import CompiledKernel, compile_kernel
from ntops_aot.aot.space import EVERY, Config, Range, Spec, Variant
from ntops_aot.aot.toolchain import Toolchain


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Build options that reach the compiler: part of every kernel's cache key."""

    num_warps: int | None = None
    num_stages: int | None = None


@dataclasses.dataclass(frozen=True)
class Build:
    """One configuration of a variant to compile: the specialisations it is built for
    (`aligned`: those assuming 16-byte alignment, or the others, or None for all;
    `specs`: only these names, if any), the sizes of the bucket keys its kernels serve, and
    the label their ids carry (`@decode`, `@prefill#2` for a tuning candidate)."""

    config: Config
    bucket: tuple[Range, Range] = (EVERY, EVERY)
    label: str = ""
    aligned: bool | None = None
    specs: tuple[str, ...] = ()
    candidate: int = 0


@dataclasses.dataclass(frozen=True)
class Task:
    variant: Variant
    key: str  # the cache key its kernels are stored under
    builds: tuple[Build, ...]  # its configurations (one per bucket winner, or candidates)


def compile_variant(
    toolchain: Toolchain,
    variant: Variant,
    options: CompileOptions,
    builds: tuple[Build, ...],
) -> list[CompiledKernel]:
    """Generate and compile every specialisation each of `builds` asks for; a
    configuration that several builds share compiles once."""
    op = ops.load(variant.op, toolchain)
    compiled: dict[tuple[str, str], CompiledKernel] = {}
    kernels = []
    for build in builds:
        config = dataclasses.replace(
            build.config,
            num_warps=options.num_warps or build.config.num_warps,
            num_stages=options.num_stages or build.config.num_stages,
        )
        specs = codegen.specs(toolchain, op, variant, config, keep=_selector(build))
        missing = [spec for spec in specs if (config.key, spec.name) not in compiled]
        generated = codegen.generate(toolchain, op, variant, config, keep=missing.__contains__)
        for kernel in generated:
            compiled[config.key, kernel.spec.name] = compile_kernel(toolchain, kernel)
        for spec in specs:
            kernels.append(
                dataclasses.replace(
                    compiled[config.key, spec.name],
                    bucket=build.bucket,
                    label=build.label,
                    candidate=build.candidate,
                    config=str(build.config),
                )
            )
    return kernels


def _selector(build: Build) -> Callable[[Spec], bool]:
    def keep(spec: Spec) -> bool:
        if build.aligned is not None and spec.aligned != build.aligned:
            return False
        return not build.specs or spec.name in build.specs

    return keep
