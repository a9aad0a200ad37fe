"""Stage 1: what to build. Crosses the ops' variant spaces with the requested arches
and filters, and names every variant; nothing is generated or compiled here."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence

from ntops_aot.aot.errors import UsageError
from ntops_aot.aot.ops import OpDef
from ntops_aot.aot.space import DTYPES, Variant
from ntops_aot.aot.targets import TARGETS


def select_ops(ops: Mapping[str, OpDef], patterns: Iterable[str]) -> list[str]:
    """Op names matching `patterns` ("all", names or globs such as 'soft*')."""
    chosen: dict[str, None] = {}
    for pattern in patterns:
        matches = list(ops) if pattern == "all" else fnmatch.filter(ops, pattern)
        if not matches:
            raise UsageError(f"no op matches {pattern!r}; ops: {', '.join(ops)}")
        chosen.update(dict.fromkeys(matches))
    return sorted(chosen)


def select_arches(names: Iterable[str]) -> list[str]:
    chosen: dict[str, None] = {}
    for name in names:
        matches = list(TARGETS) if name == "all" else [name] if name in TARGETS else []
        if not matches:
            raise UsageError(f"unknown arch {name!r}; arches: {', '.join(TARGETS)}, all")
        chosen.update(dict.fromkeys(matches))
    return [arch for arch in TARGETS if arch in chosen]


def variants(
    ops: Mapping[str, OpDef],
    op_names: Sequence[str],
    arches: Sequence[str],
    dtypes: Sequence[str] | None = None,
    ndims: Sequence[int] | None = None,
) -> list[Variant]:
    """Every variant of `op_names` for `arches`, narrowed to `dtypes` and `ndims` if given."""
    if dtypes is not None and set(dtypes) - set(DTYPES):
        unknown = sorted(set(dtypes) - set(DTYPES))
        raise UsageError(f"unknown dtypes {unknown}; dtypes: {', '.join(DTYPES)}")
    found = []
    for name in op_names:
        space = ops[name].space
        built = [ndim for ndim in space.ndims if ndims is None or ndim in ndims]
        for arch in arches:
            for dtype in space.dtypes:
                if dtypes is not None and dtype not in dtypes:
                    continue
                for ndim in built:
                    found.extend(
                        Variant(name, arch, dtype, ndim, switches, widest=ndim == max(built))
                        for switches in space.switch_choices(dtype)
                    )
    if not found:
        raise UsageError(
            f"nothing to build: ops {', '.join(op_names)} have no variant with dtypes "
            f"{dtypes or 'any'} and ndims {ndims or 'any'}"
        )
    return found
