"""Stage 2, plan: what a build makes, as data, and nothing written.

`plan(options)` finds the ops (from the cache's record of each kernel file's variant
space, importing a kernel file only when the cache has not seen it), selects the
variants, resolves each one's configurations from the tuning tables and computes the
cache key of its kernels. It writes no file: what it learnt by importing kernel files
travels in the plan (`Plan.learned`), and the compile stage stores it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import config
from ..config import BuildOptions
from ..declare import registry
from ..declare.registry import OpInfo
from ..declare.space import Variant
from ..errors import UsageError
from ..store.cache import Cache, Keys
from ..toolchain import versions
from ..toolchain.compilers import Toolchain
from ..toolchain.versions import Versions
from . import select, tuning
from .builds import Build, CompileOptions


@dataclasses.dataclass(frozen=True)
class Plan:
    options: BuildOptions
    versions: Versions  # the toolchain's, read once: keys, shards and the manifest use these
    ops: Mapping[str, OpInfo]  # every op: the wheel's registry names them all
    names: tuple[str, ...]  # the ops selected
    variants: tuple[Variant, ...]  # the variants selected (this shard's, with --shard)
    keys: Mapping[str, str]  # variant id -> cache key of its kernels
    choices: Mapping[str, Mapping[str, tuning.Choice]]  # variant id -> bucket -> config
    builds: Mapping[str, tuple[Build, ...]]  # variant id -> what it compiles
    # Cache entries of the kernel files planning had to import (op key -> entry).
    learned: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def compile_options(self) -> CompileOptions:
        return CompileOptions(self.options.num_warps, self.options.num_stages)


def plan(options: BuildOptions, environ: Mapping[str, str] | None = None) -> Plan:
    """What `options` builds, and under which keys. `environ`: where Triton's settings
    are read (os.environ by default)."""
    cache = Cache(options.cache_root)
    found = versions.read()
    keys = Keys(os.environ if environ is None else environ, found.compilers())
    ops, learned = select.scan(cache, keys, Toolchain(cache.toolchain_dir))
    names = select.select_ops(ops, options.ops)
    if options.candidates:
        names = _tunable(ops, names, options.ops)
    arches = select.select_arches(options.arches)
    variants = select.variants(ops, names, arches, options.dtypes, options.ndims, options.variants)
    if options.shard is not None:
        variants = [v for v in variants if shard_of(v, options.shard[1]) == options.shard[0]]
    tables = _tables(options, ops, arches, keys.toolchain)
    choices = {v.id: _choices(ops[v.op], v, tables.get(v.arch)) for v in variants}
    builds = {v.id: _builds(options, ops[v.op], v, choices[v.id]) for v in variants}
    compile_options = dataclasses.asdict(CompileOptions(options.num_warps, options.num_stages))
    variant_keys = {
        v.id: keys.variant(v, ops[v.op].module, compile_options, builds[v.id]) for v in variants
    }
    return Plan(
        options, found, ops, tuple(names), tuple(variants), variant_keys, choices, builds, learned
    )


def _choices(op: OpInfo, variant: Variant, table: tuning.Table | None) -> dict[str, tuning.Choice]:
    return tuning.resolve(
        variant, op.tuning, op.defaults[variant.id], op.candidates[variant.id], table
    )


def _builds(
    options: BuildOptions, op: OpInfo, variant: Variant, choices: Mapping[str, tuning.Choice]
) -> tuple[Build, ...]:
    """What a variant compiles: every candidate for a tuning wheel, else the choices."""
    if options.candidates:
        return tuning.candidate_builds(op.tuning, op.candidates[variant.id])  # type: ignore[arg-type]
    return tuning.builds(op.tuning, choices, op.defaults[variant.id])


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


def reproduce(variant: Variant, options: BuildOptions) -> str:
    """The command that builds `variant` alone, as this build did: one worker, and the
    options that reach its compiler (ndims decide its widest kernels; warps, stages and
    tuning tables its configurations)."""
    return config.command_line(
        "tune" if options.candidates else "build",
        {
            "arch": (variant.arch,),
            "ops": (variant.op,),
            "ndims": options.ndims,
            "variants": (variant.id,),
            "jobs": 1,
            "num-warps": options.num_warps,
            "num-stages": options.num_stages,
            "tuning": None if options.tuning else False,
            "tuning-dir": options.tuning_dir,
        },
    )
