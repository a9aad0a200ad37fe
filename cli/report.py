"""`ntops-aot inspect`: a wheel's manifest as a person reads it."""

from __future__ import annotations

import collections
import pathlib
from collections.abc import Mapping
from typing import Any

from ..aot.declare.space import UNBOUNDED, Config


def describe_wheel(
    wheel: pathlib.Path, manifest: Mapping[str, Any], sizes: Mapping[str, int]
) -> str:
    build, variants = manifest["build"], manifest["variants"]
    kernels = [kernel for variant in variants for kernel in variant["kernels"]]
    library = sizes.get("ntops_prebuilt/_C.abi3.so", 0)
    lines = [
        f"{wheel.name}",
        f"  version      {manifest['version']}",
        f"  size         {wheel.stat().st_size / 1e6:.1f} MB wheel, "
        f"{sum(sizes.values()) / 1e6:.1f} MB installed ({library / 1e6:.1f} MB launcher)",
        "  toolchain    " + ", ".join(f"{k} {v}" for k, v in sorted(manifest["toolchain"].items())),
        f"  arches       {', '.join(build['arches'])}",
        f"  ops          {len(build['ops'])}: {', '.join(build['ops'])}",
        f"  variants     {len(variants)} ({len(kernels)} kernels, "
        f"{sum(k['cubin_bytes'] for k in kernels) / 1e6:.1f} MB of cubins)",
    ]
    chosen = {
        k: v for k, v in build.items() if k not in ("arches", "ops") and v not in (None, False)
    }
    if chosen:
        lines.append("  options      " + ", ".join(f"{k}={v}" for k, v in sorted(chosen.items())))
    lines.append("  per arch     arch: variants, kernels, MB of cubins")
    by_arch: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for variant in variants:
        by_arch[variant["arch"]].append(variant)
    for arch in build["arches"]:
        mine = by_arch[arch]
        cubins = [k for v in mine for k in v["kernels"]]
        targets = sorted({k["target"] for k in cubins})
        ptx = sum(k.get("ptx_bytes", 0) for k in cubins)
        shipped = f"; {ptx / 1e6:.1f} MB of PTX" if ptx else ""
        lines.append(
            f"    {arch:<8} {len(mine)}, {len(cubins)}, "
            f"{sum(k['cubin_bytes'] for k in cubins) / 1e6:.1f} "
            f"(cubins for {', '.join(targets)}{shipped})"
        )
    lines.append("  per op       op: variants, kernels, MB of cubins")
    by_op: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
    for variant in variants:
        by_op[variant["op"]].append(variant)
    for op, mine in sorted(by_op.items()):
        cubins = [k for v in mine for k in v["kernels"]]
        size = sum(k["cubin_bytes"] for k in cubins) / 1e6
        lines.append(f"    {op:<30} {len(mine)}, {len(cubins)}, {size:.2f}")
    lines.extend(_buckets(manifest["ops"], variants))
    failed = manifest.get("failed", [])
    lines.append(
        f"  failed       {len(failed)}" + (" (built with --keep-going):" if failed else "")
    )
    lines.extend(f"    {failure['id']} ({failure['kind']})" for failure in failed)
    return "\n".join(lines)


def _buckets(ops: Mapping[str, Any], variants: list[Mapping[str, Any]]) -> list[str]:
    """Each tuned variant's buckets: the configuration built and where it came from."""
    tuned = [v for v in variants if ops[v["op"]].get("tuning")]
    if not tuned:
        return []
    lines = ["  buckets      variant: bucket (key sizes) configuration [from]"]
    for variant in tuned:
        lines.append(f"    {variant['id']}")
        tuning = ops[variant["op"]]["tuning"]
        for bucket in tuning["buckets"]:
            spans = [_span(*served) for served in bucket["ranges"][: 1 + bool(tuning["key2"])]]
            choice = variant["buckets"][bucket["name"]]
            config = Config.from_dict(choice["config"])
            lines.append(
                f"      {bucket['name']:<13} {' x '.join(spans):<17} {config} [{choice['from']}]"
            )
    return lines


def _span(low: int, high: int) -> str:
    """Key sizes as `low..high`, open-ended where they take every larger size."""
    return f"{low}..{'' if high == UNBOUNDED else high}"
