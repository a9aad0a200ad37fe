"""`ntops-aot merge`: the N shard files of a `build --shard K/N` matrix -> the wheel(s)
a single build would write, byte for byte (same sources, same toolchain).

A merge is a union of shards followed by the build's own package stage
(`write_wheels`). It plans the build the shards share, checks that they agree (one
selection, one toolchain, every shard once) and that they cover the plan exactly once
under the keys it computes itself (so shards of another commit or toolchain are
refused, not packaged), and packages their kernels; it compiles nothing.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .build import BuildResult
from .compile.cubins import CompiledKernel
from .compile.stage import Compiled
from .config import BuildOptions
from .errors import MergeError
from .package import shards
from .package.stage import write_wheels
from .plan.stage import Plan, plan


def merge(paths: Sequence[pathlib.Path], options: BuildOptions) -> BuildResult:
    """The wheel(s) of the build whose shards are at `paths`. Of `options` only the
    folders, keep_going, wheel_per_arch and tuning count: the selection is the shards'."""
    start = time.perf_counter()
    parts = [shards.read(path) for path in paths]
    selection = _check_shards(parts)
    planned = plan(dataclasses.replace(options, shard=None, **selection))
    _check_toolchain(planned, parts[0])
    compiled = union(planned, parts)
    compiled.check(planned)
    return BuildResult.of(write_wheels(planned, compiled), planned, compiled, start)


def union(planned: Plan, parts: Sequence[shards.Shard]) -> Compiled:
    """The shards' compiled kernels as one set: every planned variant in exactly one
    shard, under the key this checkout gives it."""
    _check_keys(planned, parts)
    order = {variant.id: index for index, variant in enumerate(planned.variants)}
    failures = sorted(
        (failure for part in parts for failure in part.failed),
        key=lambda failure: order[failure.variant],
    )
    by_key: dict[str, tuple[CompiledKernel, ...]] = {}
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
    return Compiled(kernels, tuple(failures))


def _check_shards(parts: Sequence[shards.Shard]) -> Mapping[str, Any]:
    """The selection all shards share, once each shard 1..N is there exactly once."""
    if not parts:
        raise MergeError("no shards given: ntops-aot merge SHARD.zip ...")
    first = parts[0]
    for part in parts:
        for field in ("version", "toolchain", "selection"):
            if getattr(part, field) != getattr(first, field):
                raise MergeError(
                    f"{part.path} was built with {field} {getattr(part, field)}, {first.path} "
                    f"with {getattr(first, field)}: the shards of one build share it"
                )
        if part.count != first.count:
            raise MergeError(
                f"{part.path} is shard {part.index}/{part.count}, {first.path} is "
                f"{first.index}/{first.count}: shards of one build split it the same way"
            )
    seen: dict[int, pathlib.Path] = {}
    for part in parts:
        if part.index in seen:
            raise MergeError(
                f"shard {part.index}/{first.count} is given twice ({seen[part.index]}, {part.path})"
            )
        seen[part.index] = part.path
    missing = [f"{index}/{first.count}" for index in range(1, first.count + 1) if index not in seen]
    if missing:
        raise MergeError(
            f"shard {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: "
            f"a merge takes all {first.count} shards of the build"
        )
    return first.selection


def _check_toolchain(planned: Plan, part: shards.Shard) -> None:
    """The shards were compiled by the toolchain this merge would compile with."""
    here = planned.versions.compilers()
    if dict(part.toolchain) != here:
        raise MergeError(
            f"{part.path} was compiled with {dict(part.toolchain)}, this checkout's toolchain "
            f"is {here}: merge with the ninetoothed, Triton and Python that built the shards"
        )


def _check_keys(planned: Plan, parts: Sequence[shards.Shard]) -> None:
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
