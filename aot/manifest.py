"""The wheel's manifest.json: what was built, with what, and what is missing. The
runtime reads it for its errors (`NotBuiltError`), `ntops-aot inspect` prints it."""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from ntops_aot.aot.compile import CompiledKernel
from ntops_aot.aot.config import BuildOptions
from ntops_aot.aot.errors import VariantFailure
from ntops_aot.aot.ops import OpInfo
from ntops_aot.aot.space import DTYPES, Variant, group_key
from ntops_aot.aot.targets import TARGETS

FORMAT = 2


def manifest(
    *,
    version: str,
    toolchain: Mapping[str, str],
    options: BuildOptions,
    ops: Mapping[str, OpInfo],
    names: Sequence[str],
    variants: Sequence[Variant],
    kernels: Mapping[str, Sequence[CompiledKernel]],
    failures: Sequence[VariantFailure],
    ptx: Mapping[str, pathlib.Path],
) -> dict[str, Any]:
    """`kernels` maps variant ids to their kernels; `failures` are the variants that
    have none (built with --keep-going); `ptx` the kernels shipped as PTX too."""
    return {
        "format": FORMAT,
        "version": version,
        "toolchain": dict(toolchain),
        "targets": list(TARGETS),  # the arches ntops-aot can build for
        "build": {
            "arches": sorted({variant.arch for variant in variants}, key=list(TARGETS).index),
            "ops": list(names),
            "dtypes": list(options.dtypes) if options.dtypes else None,
            "ndims": list(options.ndims) if options.ndims else None,
            "variants": list(options.variants) if options.variants else None,
            "num_warps": options.num_warps,
            "num_stages": options.num_stages,
            "max_num_configs": options.max_num_configs,
            "ptx": options.ptx,
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
            for name, op in ops.items()
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
                "kernels": [_kernel(kernel, ptx) for kernel in kernels.get(variant.id, ())],
            }
            for variant in variants
        ],
        "failed": [
            {"id": failure.variant, "kind": failure.kind, "error": failure.message.strip()}
            for failure in failures
        ],
    }


def _kernel(kernel: CompiledKernel, ptx: Mapping[str, pathlib.Path]) -> dict[str, Any]:
    shipped = {}
    if kernel.id in ptx:
        text = kernel.ptx.encode()
        shipped = {"ptx_sha256": hashlib.sha256(text).hexdigest(), "ptx_bytes": len(text)}
    return {
        "id": kernel.id,
        "spec": kernel.spec.name,
        "target": kernel.target,
        "cubin_sha256": kernel.sha256,
        "cubin_bytes": len(kernel.cubin),
        "shared": kernel.shared,
        "num_warps": kernel.num_warps,
        "num_stages": kernel.num_stages,
        **shipped,
    }
