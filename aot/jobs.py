"""One unit of work: a variant -> its compiled kernels (stages 2 and 3), run in a
worker process. The closure of this module's imports is part of every kernel's
cache key (see cache.COMPILER_MODULES): what it runs is what the key covers."""

from __future__ import annotations

import dataclasses
import pathlib

from ntops_aot.aot import codegen, ops, toolchain
from ntops_aot.aot.compile import CompiledKernel, compile_kernel
from ntops_aot.aot.space import Variant
from ntops_aot.aot.targets import TARGETS


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Build options that reach the compiler: part of every kernel's cache key."""

    num_warps: int | None = None
    num_stages: int | None = None


@dataclasses.dataclass(frozen=True)
class Task:
    variant: Variant
    key: str  # the cache key its kernels are stored under


def compile_variant(
    variant: Variant, options: CompileOptions, toolchain_dir: pathlib.Path
) -> list[CompiledKernel]:
    """Generate and compile every specialisation of `variant`."""
    op = ops.load(variant.op, toolchain_dir)
    toolchain.use_target(TARGETS[variant.arch])
    config = op.config(variant)
    config = dataclasses.replace(
        config,
        num_warps=options.num_warps or config.num_warps,
        num_stages=options.num_stages or config.num_stages,
    )
    return [compile_kernel(kernel) for kernel in codegen.generate(op, variant, config)]
