"""Shard files: what `build --shard K/N` writes and `merge` (aot/merge.py) reads.

A shard file is a zip of the kernels its variants compiled to (`kernels/<key>.pickle`,
as the cache holds them) and `shard.json`: the build's selection, the key of every
variant it covers, and the variants that failed. Its bytes depend only on its inputs.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import pickle
import zipfile
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from ntops_aot.aot.compile import CompiledKernel
from ntops_aot.aot.config import BuildOptions
from ntops_aot.aot.errors import MergeError, VariantFailure

FORMAT = 1
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
_EPOCH = (1980, 1, 1, 0, 0, 0)


def shard_name(shard: tuple[int, int]) -> str:
    return f"ntops_prebuilt-shard-{shard[0]}-of-{shard[1]}.zip"


def write_shard(
    options: BuildOptions,
    keys: Mapping[str, str],
    kernels: Mapping[str, Sequence[CompiledKernel]],
    failures: Sequence[VariantFailure],
) -> pathlib.Path:
    """Write the shard file of a `--shard` build: `keys` maps its variants to keys."""
    if options.shard is None:
        raise ValueError("write_shard needs a build with --shard")
    header = {
        "format": FORMAT,
        "ntops-aot": metadata.version("ntops-aot"),
        "shard": list(options.shard),
        "selection": _selection(options),
        "keys": dict(keys),
        "failed": [dataclasses.asdict(failure) for failure in failures],
    }
    files = {"shard.json": json.dumps(header, indent=1, sort_keys=True).encode()}
    for variant, key in keys.items():
        if variant in kernels:
            entry = pickle.dumps(list(kernels[variant]), protocol=pickle.HIGHEST_PROTOCOL)
            files[f"kernels/{key}.pickle"] = entry
    options.out_dir.mkdir(parents=True, exist_ok=True)
    path = options.out_dir / shard_name(options.shard)
    partial = path.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in sorted(files.items()):
            archive.writestr(zipfile.ZipInfo(name, date_time=_EPOCH), data, compresslevel=6)
    partial.replace(path)
    return path


@dataclasses.dataclass(frozen=True)
class Shard:
    path: pathlib.Path
    index: int  # K of K/N
    count: int  # N
    version: str  # ntops-aot's
    selection: dict[str, Any]
    keys: dict[str, str]  # variant id -> key
    failed: tuple[VariantFailure, ...]

    def kernels(self) -> dict[str, list[CompiledKernel]]:
        """The kernels of every variant it compiled, by key."""
        with zipfile.ZipFile(self.path) as archive:
            return {
                name.removeprefix("kernels/").removesuffix(".pickle"): pickle.loads(
                    archive.read(name)
                )
                for name in archive.namelist()
                if name.startswith("kernels/")
            }


def read(path: pathlib.Path) -> Shard:
    try:
        with zipfile.ZipFile(path) as archive:
            header = json.loads(archive.read("shard.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise MergeError(
            f"{path}: not a shard written by ntops-aot build --shard ({error})"
        ) from error
    if header.get("format") != FORMAT:
        raise MergeError(f"{path}: shard format {header.get('format')}, this merge reads {FORMAT}")
    selection = dict(header["selection"])
    for name in ("arches", "ops", "dtypes", "ndims", "variants"):
        if selection[name] is not None:
            selection[name] = tuple(selection[name])
    return Shard(
        path,
        header["shard"][0],
        header["shard"][1],
        header["ntops-aot"],
        selection,
        header["keys"],
        tuple(VariantFailure(**failure) for failure in header["failed"]),
    )


def _selection(options: BuildOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in SELECTION}
