"""Stage 4, package: a plan and its compiled kernels -> the wheel(s).

The one packaging path: `build` ends here, and so does `merge`, with the union of its
shards' kernels. It renders the launcher, compiles it (cached by its sources) and
writes the wheels: the only stage that writes outside the cache.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence

from ..compile.cubins import CompiledKernel
from ..compile.stage import Compiled
from ..declare.space import Variant, group_key
from ..plan.stage import Plan
from ..store.cache import Cache
from ..toolchain.targets import TARGETS
from . import wheel
from .manifest import manifest
from .render import GroupDef, render_extension


def write_wheels(planned: Plan, compiled: Compiled) -> tuple[pathlib.Path, ...]:
    """The wheel of every planned variant, and with --wheel-per-arch one per arch. A
    tuning wheel (every candidate) is versioned `+tuning`."""
    main = "tuning" if planned.options.candidates else None
    wheels = [_write_wheel(planned, planned.variants, compiled, local=main)]
    if planned.options.wheel_per_arch:
        arches = sorted({v.arch for v in planned.variants}, key=list(TARGETS).index)
        for arch in arches:
            mine = tuple(v for v in planned.variants if v.arch == arch)
            local = arch.replace("_", "")
            wheels.append(_write_wheel(planned, mine, compiled, local))
    return tuple(wheels)


def _write_wheel(
    planned: Plan, variants: Sequence[Variant], compiled: Compiled, local: str | None
) -> pathlib.Path:
    options, cache = planned.options, Cache(planned.options.cache_root)
    flat = list(compiled.flat(variants))
    cubins = wheel.write_cubins(flat, options.build_dir / "cubins")
    ptx = wheel.write_ptx(ptx_kernels(flat) if options.ptx else [], options.build_dir / "cubins")
    sources = render_extension(flat, _groups(planned), cubins, ptx)
    extension = wheel.compile_extension(
        sources, options.build_dir / "extension" / (local or "all"), cache
    )
    ids = {variant.id for variant in variants}
    contents = manifest(
        version=planned.versions.ntops_aot + (f"+{local}" if local else ""),
        toolchain=planned.versions.as_dict(),
        options=options,
        ops=planned.ops,
        names=planned.names,
        variants=variants,
        kernels=compiled.kernels,
        failures=[failure for failure in compiled.failures if failure.variant in ids],
        ptx=ptx,
        choices=planned.choices,
    )
    return wheel.write_wheel(extension, contents, options.out_dir)


def _groups(planned: Plan) -> list[GroupDef]:
    """Every op's kernel groups, built or not: the wheel's registry names them all; then
    the groups of its aliases (functions of other names over its kernels)."""
    found, aliases = [], []
    for name, op in planned.ops.items():
        keys = op.tuning.keys if op.tuning else ()
        for switches in op.space.all_switch_choices():
            key = group_key(name, switches)
            found.append(GroupDef(key, name, op.space.coalesce, op.space.allows_in_place, keys))
            aliases += [
                dataclasses.replace(found[-1], key=group_key(alias, switches), op=alias, of=key)
                for alias in op.aliases
            ]
    return found + aliases


def ptx_kernels(kernels: Sequence[CompiledKernel]) -> list[CompiledKernel]:
    """What --ptx ships: the kernels of the newest arch with portable PTX. PTX of an
    arch-specific target (sm_90a, sm_100a, sm_120a) runs only where its cubin does."""
    portable = [kernel for kernel in kernels if not kernel.target.endswith("a")]
    newest = max((TARGETS[kernel.variant.arch].capability for kernel in portable), default=None)
    return [kernel for kernel in portable if TARGETS[kernel.variant.arch].capability == newest]
