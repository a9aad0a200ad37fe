"""The wheel's manifest.json: what was built, with what, and what is missing. The
runtime reads it for its errors (`NotBuiltError`), `ntops-aot inspect` prints it."""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..compile.cubins import CompiledKernel
from ..config import BuildOptions, command_words
from ..declare.registry import OpInfo
from ..declare.space import DTYPES, Tuning, Variant, group_key
from ..errors import VariantFailure
from ..plan.tuning import Choice
from ..toolchain.targets import TARGETS

FORMAT = 4


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
    choices: Mapping[str, Mapping[str, Choice]],
) -> dict[str, Any]:
    """`kernels` maps variant ids to their kernels; `failures` are the variants that
    have none (built with --keep-going); `ptx` the kernels shipped as PTX too;
    `choices` each variant's configuration per bucket and where it came from."""
    arches = sorted({variant.arch for variant in variants}, key=list(TARGETS).index)
    return {
        "format": FORMAT,
        "version": version,
        "toolchain": dict(toolchain),
        "targets": list(TARGETS),  # the arches ntops-aot can build for
        "build": {
            "arches": arches,
            "ops": list(names),
            # The options that decide what this wheel holds, as ntops-aot writes them
            # (flag, text or None): the runtime's messages write commands from these.
            "command": command_words(
                {
                    "arch": tuple(arches),
                    "ops": tuple(names),
                    "dtypes": options.dtypes,
                    "ndims": options.ndims,
                    "variants": options.variants,
                    "num-warps": options.num_warps,
                    "num-stages": options.num_stages,
                    "max-num-configs": options.max_num_configs,
                    **({"ptx": True} if options.ptx else {}),
                    **({} if options.tuning else {"tuning": False}),
                }
            ),
            "dtypes": list(options.dtypes) if options.dtypes else None,
            "ndims": list(options.ndims) if options.ndims else None,
            "variants": list(options.variants) if options.variants else None,
            "num_warps": options.num_warps,
            "num_stages": options.num_stages,
            "max_num_configs": options.max_num_configs,
            "ptx": options.ptx,
            "tuning": options.tuning and not options.candidates,
            "candidates": options.candidates,  # a tuning wheel: every candidate built
        },
        "ops": {
            name: {
                "dtypes": list(op.space.dtypes),
                "ndims": list(op.space.ndims),
                "switches": {key: list(values) for key, values in op.space.switches.items()},
                "arches": list(op.space.arches) if op.space.arches else None,
                "arches_note": op.space.arches_note,
                "groups": {
                    group_key(name, switches): dict(switches)
                    for switches in op.space.all_switch_choices()
                },
                # Launcher groups of functions named otherwise (OpInfo.aliases), over the
                # op's kernels.
                "functions": {
                    function: {
                        group_key(function, switches): dict(switches)
                        for switches in op.space.all_switch_choices()
                    }
                    for function in op.aliases
                },
                "tuning": _tuning(op.tuning),
                "apis": [dict(api) for api in op.apis],
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
                "buckets": {
                    bucket: {"config": choice.config.as_dict(), "from": choice.source}
                    for bucket, choice in choices.get(variant.id, {}).items()
                },
                **(
                    {"candidates": _candidates(ops[variant.op], variant)}
                    if options.candidates
                    else {}
                ),
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
        "num_ctas": kernel.num_ctas,
        "scratch": kernel.scratch,
        "bucket": [list(served) for served in kernel.bucket],
        "candidate": kernel.candidate,
        "config": kernel.config,
        **shipped,
    }


def _tuning(tuning: Tuning | None) -> dict[str, Any] | None:
    """An op's tuning declaration, as the tuner and `inspect` read it."""
    if tuning is None:
        return None
    ranges = tuning.ranges()
    return {
        "function": tuning.function,
        "reference": tuning.reference,
        "options": dict(tuning.options),
        "switch_options": {
            name: {value: dict(options) for value, options in values.items()}
            for name, values in tuning.switch_options.items()
        },
        "key": list(tuning.key),
        "key2": None if tuning.key2 is None else list(tuning.key2),
        "buckets": [
            {
                "name": bucket.name,
                "upto": bucket.upto,
                "upto2": bucket.upto2,
                "ranges": [list(served) for served in ranges[bucket.name]],
                "samples": [[operand.as_dict() for operand in sample] for sample in bucket.samples],
            }
            for bucket in tuning.buckets
        ],
    }


def _candidates(op: OpInfo, variant: Variant) -> dict[str, list[dict[str, Any]]]:
    return {
        bucket: [config.as_dict() for config in configs]
        for bucket, configs in op.candidates[variant.id].items()
    }
