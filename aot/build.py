"""The pipeline end to end: enumerate -> codegen -> compile -> render -> package.

Variants compile in worker processes (each describes its own target to Triton);
the parent only plans, collects `CompiledKernel`s and packages them.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import multiprocessing
import pathlib
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from ntops_aot.aot import codegen, ops, package, toolchain
from ntops_aot.aot import enumerate as enumeration
from ntops_aot.aot.compile import CompiledKernel, compile_kernel
from ntops_aot.aot.errors import UsageError
from ntops_aot.aot.render import GroupDef, render_extension
from ntops_aot.aot.space import DTYPES, Variant, group_key
from ntops_aot.aot.targets import TARGETS


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    arches: tuple[str, ...]
    ops: tuple[str, ...] = ("all",)
    dtypes: tuple[str, ...] | None = None
    ndims: tuple[int, ...] | None = None
    build_dir: pathlib.Path = pathlib.Path("generated")
    out_dir: pathlib.Path = pathlib.Path("dist")
    jobs: int = 1
    # ntops.torch's set_default_* settings, which belong to the build here: None keeps
    # each kernel file's choice. Every kernel file declares one tile configuration, so
    # any max_num_configs of at least one keeps them all.
    num_warps: int | None = None
    num_stages: int | None = None
    max_num_configs: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_warps", "num_stages", "max_num_configs", "jobs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, not {value}")
        if self.num_warps is not None and self.num_warps & (self.num_warps - 1):
            raise UsageError(f"--num-warps must be a power of two, not {self.num_warps}")


@dataclasses.dataclass(frozen=True)
class BuildResult:
    wheel: pathlib.Path
    variants: tuple[Variant, ...]
    kernels: tuple[CompiledKernel, ...]
    seconds: float


Progress = Callable[[int, int, Variant], None]


def plan(options: BuildOptions) -> tuple[dict[str, ops.OpDef], list[str], list[Variant]]:
    """The registry, the selected op names and the variants to build."""
    registry = ops.discover(options.build_dir)
    names = enumeration.select_ops(registry, options.ops)
    arches = enumeration.select_arches(options.arches)
    found = enumeration.variants(registry, names, arches, options.dtypes, options.ndims)
    return registry, names, found


def build(options: BuildOptions, progress: Progress | None = None) -> BuildResult:
    start = time.perf_counter()
    registry, names, variants = plan(options)
    kernels = _compile_all(options, variants, progress)
    groups = [
        GroupDef(group_key(name, switches), name, op.space.coalesce, op.space.allows_in_place)
        for name, op in registry.items()
        for switches in op.space.all_switch_choices()
    ]
    cubins = package.write_cubins(kernels, options.build_dir / "cubins")
    sources = render_extension(kernels, groups, cubins)
    extension = package.compile_extension(sources, options.build_dir / "extension")
    manifest = _manifest(options, registry, names, variants, kernels)
    wheel = package.write_wheel(extension, manifest, options.out_dir)
    return BuildResult(wheel, tuple(variants), tuple(kernels), time.perf_counter() - start)


def _compile_all(
    options: BuildOptions, variants: Sequence[Variant], progress: Progress | None
) -> list[CompiledKernel]:
    build_variant = functools.partial(
        _build_variant,
        build_dir=options.build_dir,
        num_warps=options.num_warps,
        num_stages=options.num_stages,
    )
    results: dict[Variant, list[CompiledKernel]] = {}
    if options.jobs <= 1:
        for done, variant in enumerate(variants, 1):
            results[variant] = build_variant(variant)
            if progress:
                progress(done, len(variants), variant)
    else:
        # spawn: workers start clean instead of inheriting the parent's Triton state.
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(options.jobs, mp_context=context) as pool:
            futures = {pool.submit(build_variant, variant): variant for variant in variants}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                variant = futures[future]
                results[variant] = future.result()
                if progress:
                    progress(done, len(variants), variant)
    return [kernel for variant in variants for kernel in results[variant]]


def _build_variant(
    variant: Variant, build_dir: pathlib.Path, num_warps: int | None, num_stages: int | None
) -> list[CompiledKernel]:
    op = _registry(build_dir)[variant.op]
    toolchain.use_target(TARGETS[variant.arch])
    config = op.config(variant)
    config = dataclasses.replace(
        config,
        num_warps=num_warps or config.num_warps,
        num_stages=num_stages or config.num_stages,
    )
    generated = codegen.generate(op, variant, config)
    return [compile_kernel(kernel) for kernel in generated]


@functools.cache
def _registry(build_dir: pathlib.Path) -> dict[str, ops.OpDef]:
    return ops.discover(build_dir)


def _manifest(
    options: BuildOptions,
    registry: dict[str, ops.OpDef],
    names: Sequence[str],
    variants: Sequence[Variant],
    kernels: Sequence[CompiledKernel],
) -> dict[str, Any]:
    by_variant: dict[str, list[CompiledKernel]] = {}
    for kernel in kernels:
        by_variant.setdefault(kernel.variant.id, []).append(kernel)
    return {
        "format": 1,
        "version": metadata.version("ntops-aot"),
        "toolchain": package.toolchain_versions(),
        "build": {
            "arches": sorted({variant.arch for variant in variants}, key=list(TARGETS).index),
            "ops": list(names),
            "dtypes": list(options.dtypes) if options.dtypes else None,
            "ndims": list(options.ndims) if options.ndims else None,
            "num_warps": options.num_warps,
            "num_stages": options.num_stages,
            "max_num_configs": options.max_num_configs,
        },
        "ops": {
            name: {
                "dtypes": list(op.space.dtypes),
                "ndims": list(op.space.ndims),
                "switches": {key: list(values) for key, values in op.space.switches.items()},
                "groups": {
                    group_key(name, switches): dict(switches)
                    for switches in op.space.all_switch_choices()
                },
            }
            for name, op in registry.items()
        },
        "dtypes": {short: dtype.torch for short, dtype in DTYPES.items()},
        "variants": [
            {
                "id": variant.id,
                "op": variant.op,
                "arch": variant.arch,
                "dtype": variant.dtype,
                "ndim": variant.ndim,
                "switches": dict(variant.switches),
                "group": variant.group,
                "kernels": [_kernel_entry(kernel) for kernel in by_variant.get(variant.id, [])],
            }
            for variant in variants
        ],
    }


def _kernel_entry(kernel: CompiledKernel) -> dict[str, Any]:
    return {
        "id": kernel.id,
        "spec": kernel.spec.name,
        "target": kernel.target,
        "cubin_sha256": kernel.sha256,
        "cubin_bytes": len(kernel.cubin),
        "shared": kernel.shared,
        "num_warps": kernel.num_warps,
        "num_stages": kernel.num_stages,
    }
