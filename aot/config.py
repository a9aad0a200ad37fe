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
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError, UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "NTOPS_AOT_"


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


def _text(value: Any) -> str | None:
    """A value as the command line writes it (None: not written, the option's absence)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _shard_text(value: tuple[int, int] | None) -> str | None:
    return None if value is None else f"{value[0]}/{value[1]}"


def _limit_text(value: float | None) -> str | None:
    """A limit, where None is a value of its own: no limit."""
    return "none" if value is None else _text(value)


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of every layer: the BuildOptions field it sets, the parser of what a
    layer holds, its default (a callable: computed for each BuildOptions), what the help
    says of a default that is not a value, how a value is written back, and whether it is
    a path (relative to pyproject.toml when set there)."""

    field: str
    parse: Callable[[Any], Any]
    default: Any = None
    shown: str | None = None
    text: Callable[[Any], str | None] = _text
    is_path: bool = False

    @property
    def help_default(self) -> str | None:
        if self.shown is not None:
            return self.shown
        return None if self.default is None else self.text(self.default)


# The one table of options and their defaults: BuildOptions, the layers and the
# command's help all read it. Keyed by the command line's name, without --.
OPTIONS: Mapping[str, Option] = {
    "arch": Option("arches", _words, ("sm_90",)),
    "ops": Option("ops", _words, ("all",)),
    "dtypes": Option("dtypes", _words),
    "ndims": Option("ndims", _ints),
    "variants": Option("variants", _words),  # globs over variant ids
    "build-dir": Option("build_dir", pathlib.Path, pathlib.Path("generated"), is_path=True),
    "cache-dir": Option("cache_dir", pathlib.Path, shown="BUILD_DIR/cache", is_path=True),
    "out": Option("out_dir", pathlib.Path, pathlib.Path("dist"), is_path=True),
    "jobs": Option("jobs", _int, default_jobs, shown="the machine's cores"),
    # Seconds one variant may compile, MiB one worker (with its ptxas) may hold.
    "timeout": Option("timeout", _seconds, 900.0, text=_limit_text),
    "max-memory": Option("max_memory", _mebibytes, 6144, text=_limit_text),
    "keep-going": Option("keep_going", _bool, False),
    "wheel-per-arch": Option("wheel_per_arch", _bool, False),
    "ptx": Option("ptx", _bool, False),
    "shard": Option("shard", _shard, text=_shard_text),  # (K, N): the K-th of N, 1-based
    # ntops.torch's set_default_* settings, which belong to the build here: None keeps
    # each kernel file's choice. Every kernel file declares one tile configuration, so
    # any max_num_configs of at least one keeps them all.
    "num-warps": Option("num_warps", _int, shown="each kernel file's"),
    "num-stages": Option("num_stages", _int, shown="each kernel file's"),
    "max-num-configs": Option("max_num_configs", _int),
    # Tuning tables: the winners in tuning_dir (None: those shipped with the kernel
    # files) unless tuning is off.
    "tuning": Option("tuning", _bool, True),
    "tuning-dir": Option("tuning_dir", pathlib.Path, shown="kernels/tuning", is_path=True),
}


def _default(option: str) -> Any:
    """BuildOptions' default for `option`, from OPTIONS."""
    default = OPTIONS[option].default
    return dataclasses.field(default_factory=default) if callable(default) else default


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """What a build is asked for: every field but `candidates` is an option of OPTIONS,
    whose default it takes from there."""

    arches: tuple[str, ...] = _default("arch")
    ops: tuple[str, ...] = _default("ops")
    dtypes: tuple[str, ...] | None = _default("dtypes")
    ndims: tuple[int, ...] | None = _default("ndims")
    variants: tuple[str, ...] | None = _default("variants")
    build_dir: pathlib.Path = _default("build-dir")
    cache_dir: pathlib.Path | None = _default("cache-dir")  # None: build_dir / "cache"
    out_dir: pathlib.Path = _default("out")
    jobs: int = _default("jobs")
    timeout: float | None = _default("timeout")
    max_memory: int | None = _default("max-memory")
    keep_going: bool = _default("keep-going")
    wheel_per_arch: bool = _default("wheel-per-arch")
    ptx: bool = _default("ptx")
    shard: tuple[int, int] | None = _default("shard")
    num_warps: int | None = _default("num-warps")
    num_stages: int | None = _default("num-stages")
    max_num_configs: int | None = _default("max-num-configs")
    tuning: bool = _default("tuning")
    tuning_dir: pathlib.Path | None = _default("tuning-dir")
    # A tuning wheel instead (every candidate configuration of the ops that declare a
    # TUNING): what `ntops-aot tune` builds; not an option of its own.
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


def command_line(command: str, values: Mapping[str, Any]) -> str:
    """`ntops-aot COMMAND ...` with `values` (option name -> value as BuildOptions holds
    it), in the table's order: how every message writes a command. A None is left out
    (the layers below decide) unless it means something of its own (`--timeout none`)."""
    words = ["ntops-aot", command]
    for flag, text in command_words(values):
        words += [flag] if text is None else [flag, shlex.quote(text)]
    return " ".join(words)


def command_words(values: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """`values` as command_line writes them, unquoted: (flag, its text, or None for a
    flag alone). A wheel's manifest keeps its build's so that the wheel, which has no
    ntops-aot, writes commands as ntops-aot does."""
    unknown = sorted(set(values) - set(OPTIONS))
    if unknown:
        raise ValueError(f"no options {unknown}")
    words: list[tuple[str, str | None]] = []
    for name, option in OPTIONS.items():
        value, text = values.get(name), option.text(values.get(name))
        if isinstance(value, bool):
            words.append((f"--{name}" if value else f"--no-{name}", None))
        elif name in values and text is not None:
            words.append((f"--{name}", text))
    return words


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
    values: dict[str, Any] = {}
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
    spec = OPTIONS[option]
    try:
        parsed = spec.parse(value)
    except ValueError as error:
        error_type = UsageError if where.startswith("--") else ConfigError
        raise error_type(f"{where}: {value!r}: {error}") from error
    if spec.is_path and base is not None and not parsed.is_absolute():
        parsed = base / parsed
    return {spec.field: parsed}


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
