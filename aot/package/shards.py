"""Shard files: a set of compiled kernels, serialised. `build --shard K/N` writes one
(its plan's selection and its `Compiled`), `merge` (aot/merge.py) reads them back.

A shard file is a zip of the kernels its variants compiled to (`kernels/<key>.pickle`,
as the cache holds them) and `shard.json`: the build's selection, the toolchain that
compiled them, the key of every variant it covers, and the variants that failed. Its
bytes depend only on its inputs (archive.py).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import pickle
import zipfile
from collections.abc import Mapping
from typing import Any

from ..compile.cubins import CompiledKernel
from ..compile.stage import Compiled
from ..config import BuildOptions
from ..errors import MergeError, VariantFailure
from ..plan.stage import Plan
from ..store.cache import write_atomic
from . import archive

FORMAT = 2
# What a shard's build chose: the merge must plan exactly the same build.
SELECTION = (
    "arches",
    "ops",
    "dtypes",
    "ndims",
    "variants",
    "num_warps",
    "num_stages",
    "max_num_configs",
    "ptx",
)


def shard_name(shard: tuple[int, int]) -> str:
    return f"ntops_prebuilt-shard-{shard[0]}-of-{shard[1]}.zip"


def write(planned: Plan, compiled: Compiled) -> pathlib.Path:
    """Write the shard file of a `--shard` build's plan and its compiled kernels."""
    options = planned.options
    if options.shard is None:
        raise ValueError("a shard file is written by a build with --shard")
    header = {
        "format": FORMAT,
        "ntops-aot": planned.versions.ntops_aot,
        "toolchain": planned.versions.compilers(),
        "shard": list(options.shard),
        "selection": selection(options),
        "keys": dict(planned.keys),
        "failed": [dataclasses.asdict(failure) for failure in compiled.failures],
    }
    files = {"shard.json": json.dumps(header, indent=1, sort_keys=True).encode()}
    for variant, key in planned.keys.items():
        if variant in compiled.kernels:
            entry = pickle.dumps(list(compiled.kernels[variant]), protocol=pickle.HIGHEST_PROTOCOL)
            files[f"kernels/{key}.pickle"] = entry
    path = options.out_dir / shard_name(options.shard)
    write_atomic(path, archive.zip_bytes(files))
    return path


@dataclasses.dataclass(frozen=True)
class Shard:
    path: pathlib.Path
    index: int  # K of K/N
    count: int  # N
    version: str  # ntops-aot's
    toolchain: Mapping[str, str]  # the compilers' versions (`Versions.compilers`)
    selection: Mapping[str, Any]
    keys: Mapping[str, str]  # variant id -> key
    failed: tuple[VariantFailure, ...]

    def kernels(self) -> dict[str, tuple[CompiledKernel, ...]]:
        """The kernels of every variant it compiled, by key."""
        with zipfile.ZipFile(self.path) as zipped:
            return {
                name.removeprefix("kernels/").removesuffix(".pickle"): tuple(
                    pickle.loads(zipped.read(name))
                )
                for name in zipped.namelist()
                if name.startswith("kernels/")
            }


def read(path: pathlib.Path) -> Shard:
    try:
        with zipfile.ZipFile(path) as zipped:
            header = json.loads(zipped.read("shard.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise MergeError(
            f"{path}: not a shard written by ntops-aot build --shard ({error})"
        ) from error
    if header.get("format") != FORMAT:
        raise MergeError(
            f"{path}: shard format {header.get('format')}, this merge reads {FORMAT}: "
            "build the shards and merge them with the same ntops-aot"
        )
    chosen = dict(header["selection"])
    for name in ("arches", "ops", "dtypes", "ndims", "variants"):
        if chosen[name] is not None:
            chosen[name] = tuple(chosen[name])
    return Shard(
        path,
        header["shard"][0],
        header["shard"][1],
        header["ntops-aot"],
        header["toolchain"],
        chosen,
        header["keys"],
        tuple(VariantFailure(**failure) for failure in header["failed"]),
    )


def selection(options: BuildOptions) -> dict[str, Any]:
    """What of `options` decides which variants a build compiles, and how."""
    return {name: getattr(options, name) for name in SELECTION}
