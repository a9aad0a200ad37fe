"""Tuning: the shape buckets an op's launcher tells apart, the configurations worth
trying in each, and the tables that say which one won on a real GPU.

A kernel file opts in with a `TUNING = Tuning(...)` next to its `SPACE`, and then
defines `config(variant, bucket)` (the declared default of each bucket) and
`candidates(variant, bucket)` (what a tuning run times, the default among them).
`ntops-aot tune` builds a wheel holding every candidate; `python -m
ntops_prebuilt.tune` times them on a GPU and writes a table; tables committed under
`kernels/tuning/<arch>.json` are what `ntops-aot build` compiles (`resolve`): each
bucket's winner, or its declared default where the arch has no table.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from .. import config
from ..declare.space import ALL, Config, Range, Tuning, Variant
from ..errors import TuningError
from .builds import Build

TABLE_FORMAT = 1
TABLES_PACKAGE = "ntops_aot.kernels"
TABLES_FOLDER = "tuning"


@dataclasses.dataclass(frozen=True)
class Choice:
    """The configuration a variant's bucket is built with, and where it came from:
    "default" (the kernel file's declaration) or a table (`Table.source`)."""

    config: Config
    source: str


@dataclasses.dataclass(frozen=True)
class Table:
    """One arch's tuning table: per variant id and bucket, the winning configuration."""

    path: pathlib.Path
    arch: str
    provenance: Mapping[str, Any]
    entries: Mapping[str, Mapping[str, Mapping[str, Any]]]

    def label(self, variant: str, bucket: str) -> str:
        return f"{self.path} entry {variant} / {bucket}"

    @property
    def source(self) -> str:
        """How a wheel's manifest names the table: no path of the building machine."""
        if self.path.resolve().parent == tables_dir().resolve():
            return f"{TABLES_PACKAGE.rpartition('.')[2]}/{TABLES_FOLDER}/{self.path.name}"
        return f"{self.path.name} (--tuning-dir)"


def tables_dir() -> pathlib.Path:
    """The tables that ship with the kernel files."""
    import importlib.resources

    return pathlib.Path(str(importlib.resources.files(TABLES_PACKAGE) / TABLES_FOLDER))


def load_table(path: pathlib.Path) -> Table:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise TuningError(f"{path}: not a readable tuning table ({error})") from error
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT:
        raise TuningError(f"{path}: not a tuning table of format {TABLE_FORMAT}")
    for field in ("arch", "provenance", "entries"):
        if field not in data:
            raise TuningError(f"{path}: the table has no {field!r}")
    return Table(path, data["arch"], data["provenance"], data["entries"])


def load_tables(directory: pathlib.Path | None, arches: Sequence[str]) -> dict[str, Table]:
    """The tables of `arches` found in `directory` (None: no tables), by arch."""
    if directory is None:
        return {}
    tables = {}
    for arch in arches:
        path = directory / f"{arch}.json"
        if path.is_file():
            table = load_table(path)
            if table.arch != arch:
                raise TuningError(f"{path}: the table is for {table.arch}, its name says {arch}")
            tables[arch] = table
    return tables


def check_toolchain(table: Table, toolchain: Mapping[str, str]) -> None:
    """A table measured kernels of one ninetoothed and Triton: others compile other code."""
    measured = table.provenance.get("toolchain", {})
    for name in ("ninetoothed", "triton"):
        if measured.get(name) != toolchain.get(name):
            first = next(iter(table.entries), "(none)")
            raise TuningError(
                f"{table.path}: the table (first entry {first}) was measured with {name} "
                f"{measured.get(name)}, this toolchain has {toolchain.get(name)}; tune again "
                f"({config.command_line('tune', {'arch': (table.arch,)})} ...) or build "
                "with --no-tuning"
            )


def resolve(
    variant: Variant,
    tuning: Tuning | None,
    defaults: Mapping[str, Config],
    candidates: Mapping[str, Sequence[Config]],
    table: Table | None,
) -> dict[str, Choice]:
    """Each bucket's configuration for `variant`: the table's winner, else the default."""
    if tuning is None:
        return {ALL: Choice(defaults[ALL], "default")}
    entries = dict(table.entries.get(variant.id, {})) if table else {}
    unknown = sorted(set(entries) - set(tuning.names))
    if unknown:
        raise TuningError(
            f"{table.label(variant.id, unknown[0])}: {variant.op} has no bucket "  # type: ignore[union-attr]
            f"{unknown[0]!r}; its buckets: {', '.join(tuning.names)}"
        )
    chosen = {}
    for bucket in tuning.names:
        if bucket not in entries:
            chosen[bucket] = Choice(defaults[bucket], "default")
            continue
        label = table.label(variant.id, bucket)  # type: ignore[union-attr]
        try:
            config = Config.from_dict(entries[bucket]["config"])
        except (KeyError, TypeError, ValueError) as error:
            raise TuningError(f"{label}: not a configuration ({error})") from error
        declared = [c.key for c in candidates[bucket]]
        if config.key not in declared:
            raise TuningError(
                f"{label}: configuration {config} is not among the candidates "
                f"kernels/{variant.op}.py declares for that bucket; they are: "
                + "; ".join(str(c) for c in candidates[bucket])
            )
        chosen[bucket] = Choice(config, table.source)  # type: ignore[union-attr]
    return chosen


def check_variants(table: Table, known: Sequence[str]) -> None:
    """Entries must name variants the kernel files can build."""
    missing = sorted(set(table.entries) - set(known))
    if missing:
        raise TuningError(
            f"{table.path}: entry {missing[0]} names no variant the kernel files build "
            f"for {table.arch} (list them: {config.command_line('list', {'arch': (table.arch,)})})"
        )


def builds(
    tuning: Tuning | None, choices: Mapping[str, Choice], defaults: Mapping[str, Config]
) -> tuple[Build, ...]:
    """What a wheel compiles of one variant: for the aligned specialisations (those a
    tuning run measures), each run of consecutive buckets that chose one
    configuration and serve one rectangle of key sizes; for the rest (unaligned and
    64-bit fallbacks, serving every bucket) the last bucket's declared default, which
    the kernel file vouches for with every kind of load (a winner may use what only
    TMA loads allow, such as warp specialisation)."""
    if tuning is None:
        return (Build(choices[ALL].config),)
    ranges = tuning.ranges()
    runs: list[tuple[Config, tuple[Range, Range], list[str]]] = []
    for bucket in tuning.names:
        config, served = choices[bucket].config, ranges[bucket]
        joined = runs and runs[-1][0].key == config.key and _join(runs[-1][1], served)
        if joined:
            runs[-1] = (config, joined, [*runs[-1][2], bucket])
        else:
            runs.append((config, served, [bucket]))
    found = [
        Build(config, served, "@" + "+".join(names), aligned=True) for config, served, names in runs
    ]
    found.append(Build(defaults[tuning.names[-1]], aligned=False))
    return tuple(found)


def _join(a: tuple[Range, Range], b: tuple[Range, Range]) -> tuple[Range, Range] | None:
    """The sizes two buckets serve together, if they make one rectangle (the launcher
    tells kernels apart by a range of each key)."""
    if a[1] == b[1] and a[0][1] + 1 == b[0][0]:
        return (a[0][0], b[0][1]), a[1]
    if a[0] == b[0] and a[1][1] + 1 == b[1][0]:
        return a[0], (a[1][0], b[1][1])
    return None


def candidate_builds(
    tuning: Tuning, candidates: Mapping[str, Sequence[Config]]
) -> tuple[Build, ...]:
    """What a tuning wheel compiles of one variant: every candidate of every bucket,
    for the specialisations the samples run, numbered within its bucket."""
    ranges = tuning.ranges()
    return tuple(
        Build(
            config,
            ranges[bucket],
            f"@{bucket}#{index}",
            aligned=True,
            specs=tuning.specs,
            candidate=index,
        )
        for bucket in tuning.names
        for index, config in enumerate(candidates[bucket])
    )
