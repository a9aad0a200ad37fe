"""The plan stage's selection: what to build. Finds the ops (`scan`), crosses their
variant spaces with the requested arches and filters, and names every variant;
nothing is generated or compiled here."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import config
from ..declare import registry
from ..declare.registry import OpInfo
from ..declare.space import DTYPES, Variant
from ..errors import UsageError
from ..store.cache import Cache, Keys
from ..toolchain.compilers import Toolchain
from ..toolchain.targets import TARGETS


def scan(
    cache: Cache, keys: Keys, toolchain: Toolchain
) -> tuple[dict[str, OpInfo], dict[str, Any]]:
    """Every op, by name, in sorted order, and the cache entries the cache lacked (by
    key), which the caller stores: a kernel file is imported (and with it ninetoothed,
    Triton and torch) only when it or a module it imports changed."""
    found, learned = {}, {}
    for module in registry.kernel_modules():
        key = keys.op(module)
        entry = cache.load("ops", key)
        if entry is None:
            entry = learned[key] = {"op": registry.read_op(module, toolchain)}
        if entry["op"] is not None:
            found[entry["op"].name] = entry["op"]
    return found, learned


def select_ops(ops: Mapping[str, OpInfo], patterns: Iterable[str]) -> list[str]:
    """Op names matching `patterns` ("all", names or globs such as 'soft*'): an op
    matches by its name or by a function it serves (`eq` selects `comparison`)."""
    chosen: dict[str, None] = {}
    for pattern in patterns:
        matches = [
            name
            for name, op in ops.items()
            if pattern == "all"
            or fnmatch.fnmatchcase(name, pattern)
            or fnmatch.filter([api["name"] for api in op.apis], pattern)
        ]
        if not matches:
            raise UsageError(f"no op matches {pattern!r}; ops: {_listing(ops)}")
        chosen.update(dict.fromkeys(matches))
    return sorted(chosen)


def _listing(ops: Mapping[str, OpInfo]) -> str:
    """`abs, add, ..., comparison (eq, ne, lt, le, gt, ge), ...`: each op, and the
    functions it serves where they are named otherwise."""
    parts = []
    for name, op in ops.items():
        functions = [api["name"] for api in op.apis]
        parts.append(name if functions in ([], [name]) else f"{name} ({', '.join(functions)})")
    return ", ".join(parts)


def select_arches(names: Iterable[str]) -> list[str]:
    chosen: dict[str, None] = {}
    for name in names:
        matches = list(TARGETS) if name == "all" else [name] if name in TARGETS else []
        if not matches:
            raise UsageError(f"unknown arch {name!r}; arches: {', '.join(TARGETS)}, all")
        chosen.update(dict.fromkeys(matches))
    return [arch for arch in TARGETS if arch in chosen]


def variants(
    ops: Mapping[str, OpInfo],
    op_names: Sequence[str],
    arches: Sequence[str],
    dtypes: Sequence[str] | None = None,
    ndims: Sequence[int] | None = None,
    patterns: Sequence[str] | None = None,
) -> list[Variant]:
    """Every variant of `op_names` for `arches`, narrowed to `dtypes` and `ndims`, and
    to ids matching one of `patterns` (globs), if given."""
    if dtypes is not None and set(dtypes) - set(DTYPES):
        unknown = sorted(set(dtypes) - set(DTYPES))
        raise UsageError(f"unknown dtypes {unknown}; dtypes: {', '.join(DTYPES)}")
    found = []
    for name in op_names:
        space = ops[name].space
        built = [ndim for ndim in space.ndims if ndims is None or ndim in ndims]
        for arch in filter(space.builds_for, arches):
            for dtype in space.dtypes:
                if dtypes is not None and dtype not in dtypes:
                    continue
                for ndim in built:
                    found.extend(
                        Variant(name, arch, dtype, ndim, switches, widest=ndim == max(built))
                        for switches in space.switch_choices(dtype)
                    )
    if patterns is not None:
        found = [v for v in found if any(fnmatch.fnmatchcase(v.id, p) for p in patterns)]
    if not found:
        if patterns is not None:
            listing = config.command_line("list", {"arch": arches, "ops": op_names})
            raise UsageError(f"no variant matches {', '.join(patterns)}; list them: {listing}")
        raise UsageError(
            f"nothing to build: ops {', '.join(op_names)} have no variant with dtypes "
            f"{dtypes or 'any'} and ndims {ndims or 'any'}"
        )
    return found
