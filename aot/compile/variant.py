"""One unit of the compile stage's work: a variant -> its compiled kernels (code
generation, then Triton), run in a worker process. The closure of this module's
imports is part of every kernel's cache key (store/cache.py's COMPILER_MODULES): what
it runs is what the key covers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..declare import registry
from ..declare.space import Spec, Variant
from ..plan.builds import Build, CompileOptions
from ..toolchain.compilers import Toolchain
from . import codegen
from .cubins import CompiledKernel, compile_kernel


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
    op = registry.load(variant.op, toolchain)
    compiled: dict[tuple[str, str], CompiledKernel] = {}
    kernels = []
    for build in builds:
        config = dataclasses.replace(
            build.config,
            num_warps=options.num_warps or build.config.num_warps,
            num_stages=options.num_stages or build.config.num_stages,
        )
        specs = codegen.specs(op, variant, config, keep=selector(build))
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


def selector(build: Build) -> Callable[[Spec], bool]:
    def keep(spec: Spec) -> bool:
        if build.aligned is not None and spec.aligned != build.aligned:
            return False
        return not build.specs or spec.name in build.specs

    return keep
