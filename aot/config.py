"""Build options, layered once: command line > `NTOPS_AOT_*` environment >
`[tool.ntops-aot]` in ./pyproject.toml > defaults.

Every option has one name in each layer (`--cache-dir`, `NTOPS_AOT_CACHE_DIR`,
`cache-dir = "..."`) and one parser, so a value means the same wherever it is set,
and a bad one is reported with the place it came from.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ntops_aot.aot.errors import ConfigError, UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "NTOPS_AOT_"


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    arches: tuple[str, ...] = ("sm_90",)
    ops: tuple[str, ...] = ("all",)
    dtypes: tuple[str, ...] | None = None
    ndims: tuple[int, ...] | None = None
    variants: tuple[str, ...] | None = None  # globs over variant ids
    build_dir: pathlib.Path = pathlib.Path("generated")
    cache_dir: pathlib.Path | None = None  # None: build_dir / "cache"
    out_dir: pathlib.Path = pathlib.Path("dist")
    jobs: int = 1
    timeout: float | None = 900.0  # seconds one variant may compile
    max_memory: int | None = 6144  # MiB one worker (with its ptxas) may hold
    keep_going: bool = False
    wheel_per_arch: bool = False
    ptx: bool = False
    shard: tuple[int, int] | None = None  # (K, N): the K-th of N shards, 1-based
    # ntops.torch's set_default_* settings, which belong to the build here: None keeps
    # each kernel file's choice. Every kernel file declares one tile configuration, so
    # any max_num_configs of at least one keeps them all.
    num_warps: int | None = None
    num_stages: int | None = None
    max_num_configs: int | None = None
    # Tuning tables: the winners in `tuning_dir` (None: those shipped with the kernel
    # files) unless `tuning` is off; `candidates` builds a tuning wheel instead (every
    # candidate configuration of the ops that declare a TUNING: `ntops-aot tune`).
    tuning: bool = True
    tuning_dir: pathlib.Path | None = None
    candidates: bool = False

    def __post_init__(self) -> None:
        for name in ("num_warps", "num_stages", "max_num_configs", "jobs", "max_memory"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, not {value}")
        if self.num_warps is not None and self.num_warps & (self.num_warps - 1):
            raise UsageError(f"--num-warps must be a power of two, not {self.num_warps}")
        if self.timeout is not None and self.timeout <= 0:
            raise UsageError(f"--timeout must be positive, not {self.timeout}")
        if self.shard is not None and not 1 <= self.shard[0] <= self.shard[1]:
            raise UsageError(f"--shard K/N needs 1 <= K <= N, not {self.shard[0]}/{self.shard[1]}")

    @property
    def cache_root(self) -> pathlib.Path:
        return self.cache_dir if self.cache_dir is not None else self.build_dir / "cache"


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# --- parsers: each takes what a layer holds (a string, or a TOML value) ---------------


def _words(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    words = tuple(str(item).strip() for item in items if str(item).strip())
    if not words:
        raise ValueError("expected a comma-separated list")
    return words


def _ints(value: Any) -> tuple[int, ...]:
    try:
        return tuple(int(word) for word in _words(value))
    except ValueError as error:
        raise ValueError("expected comma-separated integers") from error


def _int(value: Any) -> int:
    if isinstance(value, bool) or not str(value).strip().lstrip("-").isdigit():
        raise ValueError("expected an integer")
    return int(value)


def _seconds(value: Any) -> float | None:
    if str(value).strip().lower() in ("none", "0"):
        return None
    try:
        return float(value)
    except ValueError as error:
        raise ValueError("expected seconds (or none)") from error


def _mebibytes(value: Any) -> int | None:
    return None if str(value).strip().lower() in ("none", "0") else _int(value)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _shard(value: Any) -> tuple[int, int]:
    parts = str(value).split("/")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise ValueError("expected K/N, e.g. 1/4")
    return int(parts[0]), int(parts[1])


# option name (the command line's, without --) -> (BuildOptions field, parser, is a path)
OPTIONS: Mapping[str, tuple[str, Callable[[Any], Any], bool]] = {
    "arch": ("arches", _words, False),
    "ops": ("ops", _words, False),
    "dtypes": ("dtypes", _words, False),
    "ndims": ("ndims", _ints, False),
    "variants": ("variants", _words, False),
    "build-dir": ("build_dir", pathlib.Path, True),
    "cache-dir": ("cache_dir", pathlib.Path, True),
    "out": ("out_dir", pathlib.Path, True),
    "jobs": ("jobs", _int, False),
    "timeout": ("timeout", _seconds, False),
    "max-memory": ("max_memory", _mebibytes, False),
    "keep-going": ("keep_going", _bool, False),
    "wheel-per-arch": ("wheel_per_arch", _bool, False),
    "ptx": ("ptx", _bool, False),
    "shard": ("shard", _shard, False),
    "num-warps": ("num_warps", _int, False),
    "num-stages": ("num_stages", _int, False),
    "max-num-configs": ("max_num_configs", _int, False),
    "tuning": ("tuning", _bool, False),
    "tuning-dir": ("tuning_dir", pathlib.Path, True),
}


def env_name(option: str) -> str:
    return ENV_PREFIX + option.upper().replace("-", "_")


def resolve(
    command_line: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    project: pathlib.Path | None = None,
) -> BuildOptions:
    """BuildOptions from the layers. `command_line` maps option names to what the
    user typed (None: not given); `project` is the folder whose pyproject.toml counts."""
    environ = os.environ if environ is None else environ
    project = pathlib.Path.cwd() if project is None else project
    values: dict[str, Any] = {"jobs": default_jobs()}
    for option, value in _pyproject(project).items():
        values.update(_parse(option, value, "pyproject.toml [tool.ntops-aot]", project))
    for name in sorted(n for n in environ if n.startswith(ENV_PREFIX)):
        option = name.removeprefix(ENV_PREFIX).lower().replace("_", "-")
        if option not in OPTIONS:
            known = ", ".join(env_name(o) for o in OPTIONS)
            raise ConfigError(f"unknown setting {name}; settings: {known}")
        values.update(_parse(option, environ[name], f"environment {name}", None))
    for option, value in command_line.items():
        if value is not None:
            values.update(_parse(option, value, f"--{option}", None))
    return BuildOptions(**values)


def _parse(option: str, value: Any, where: str, base: pathlib.Path | None) -> dict[str, Any]:
    field, parse, is_path = OPTIONS[option]
    try:
        parsed = parse(value)
    except ValueError as error:
        error_type = UsageError if where.startswith("--") else ConfigError
        raise error_type(f"{where}: {value!r}: {error}") from error
    if is_path and base is not None and not parsed.is_absolute():
        parsed = base / parsed
    return {field: parsed}


def _pyproject(project: pathlib.Path) -> dict[str, Any]:
    path = project / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        table = tomllib.loads(path.read_text()).get("tool", {}).get("ntops-aot", {})
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: {error}") from error
    unknown = sorted(set(table) - set(OPTIONS))
    if unknown:
        raise ConfigError(
            f"{path}: unknown keys {unknown} in [tool.ntops-aot]; keys: {', '.join(OPTIONS)}"
        )
    return table
