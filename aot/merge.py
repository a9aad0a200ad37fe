"""`ntops-aot merge`: the N shard files of a `build --shard K/N` matrix -> the wheel(s)
a single build would write, byte for byte (same sources, same toolchain).

The merge plans the build the shards share, checks that they cover it exactly once
with the keys it computes itself (so shards of another commit or toolchain are
refused, not packaged), and packages their kernels; it compiles nothing.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Sequence

from ntops_aot.aot import build as pipeline
from ntops_aot.aot import shards
from ntops_aot.aot.compile import CompiledKernel
from ntops_aot.aot.config import BuildOptions
from ntops_aot.aot.errors import MergeError, VariantsFailed


def merge(paths: Sequence[pathlib.Path], options: BuildOptions) -> pipeline.BuildResult:
    """The wheel(s) of the build whose shards are at `paths`. Of `options` only the
    folders, keep_going and wheel_per_arch count: the selection is the shards'."""
    start = time.perf_counter()
    parts = [shards.read(path) for path in paths]
    selection = _check_shards(parts)
    planned = pipeline.plan(dataclasses.replace(options, shard=None, **selection))
    _check_keys(planned, parts)
    failures = [failure for part in parts for failure in part.failed]
    order = {variant.id: index for index, variant in enumerate(planned.variants)}
    failures.sort(key=lambda failure: order[failure.variant])
    if failures and not options.keep_going:
        raise VariantsFailed(failures, len(planned.variants))
    by_key: dict[str, list[CompiledKernel]] = {}
    for part in parts:
        by_key.update(part.kernels())
    failed = {failure.variant for failure in failures}
    kernels = {}
    for variant in planned.variants:
        if variant.id in failed:
            continue
        key = planned.keys[variant.id]
        if key not in by_key:
            raise MergeError(f"the shard listing {variant.id} does not hold its kernels")
        kernels[variant.id] = by_key[key]
    wheels = pipeline.write_wheels(planned, kernels, failures)
    flat = tuple(k for v in planned.variants for k in kernels.get(v.id, ()))
    seconds = time.perf_counter() - start
    return pipeline.BuildResult(wheels, planned.variants, flat, tuple(failures), 0, seconds)


def _check_shards(parts: Sequence[shards.Shard]) -> dict[str, object]:
    """The selection all shards share, once each shard 1..N is there exactly once."""
    if not parts:
        raise MergeError("no shards given: ntops-aot merge SHARD.zip ...")
    first = parts[0]
    for part in parts:
        for field in ("version", "selection"):
            if getattr(part, field) != getattr(first, field):
                raise MergeError(
                    f"{part.path} was built with {field} {getattr(part, field)}, {first.path} "
                    f"with {getattr(first, field)}: shards of one build share both"
                )
    count = first.count
    for part in parts:
        if part.count != count:
            raise MergeError(
                f"{part.path} is shard {part.index}/{part.count}, {first.path} is "
                f"{first.index}/{count}: shards of one build split it the same way"
            )
    seen: dict[int, pathlib.Path] = {}
    for part in parts:
        if part.index in seen:
            raise MergeError(
                f"shard {part.index}/{count} is given twice ({seen[part.index]}, {part.path})"
            )
        seen[part.index] = part.path
    missing = [f"{index}/{count}" for index in range(1, count + 1) if index not in seen]
    if missing:
        raise MergeError(
            f"shard {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: "
            f"a merge takes all {count} shards of the build"
        )
    return first.selection


def _check_keys(planned: pipeline.Plan, parts: Sequence[shards.Shard]) -> None:
    """Every planned variant in exactly one shard, under the key this checkout gives it."""
    owner: dict[str, pathlib.Path] = {}
    for part in parts:
        for variant, key in part.keys.items():
            expected = planned.keys.get(variant)
            if expected is None:
                raise MergeError(f"{part.path} holds {variant}, which this build does not plan")
            if key != expected:
                raise MergeError(
                    f"{part.path}: {variant} was compiled from other sources or another "
                    "toolchain (its cache key differs from this checkout's): merge shards "
                    "built from the same commit, ninetoothed, Triton and TRITON_* settings"
                )
            if variant in owner:
                raise MergeError(f"{variant} is in both {owner[variant]} and {part.path}")
            owner[variant] = part.path
    missing = [variant.id for variant in planned.variants if variant.id not in owner]
    if missing:
        raise MergeError(f"no shard holds {len(missing)} of the variants, e.g. {missing[0]}")
