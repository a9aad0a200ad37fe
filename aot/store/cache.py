"""The build cache: content-addressed, safe to share, safe to kill.

Every entry is stored under the sha256 of everything that changes it, so a key that
exists is an answer that is right. Three kinds of entry:

- `ops`: a kernel file's variant space (`SPACE`), keyed on the file and the project
  modules it imports: planning a build needs no ninetoothed, Triton or torch import
  when nothing changed.
- `kernels`: a variant's compiled kernels, keyed on its kernel file and imports, the
  modules that compile it (`aot/compile/variant.py` and its imports), the ninetoothed and
  Triton versions, Python's version, Triton's environment, the variant and the options.
- `extensions`: the launcher library, keyed on its C (hand-written and rendered), the compiler
  and flags.

Entries are written to a temporary name and renamed into place, so a build killed at
any moment leaves only whole entries, and concurrent builds may share a cache.
Triton's and ninetoothed's own caches live under `toolchain/` beside them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from ..declare.space import Variant
from . import fingerprint

FORMAT = 2
# The modules a worker runs to turn a variant into cubins: their closure is part of
# every kernel key (editing codegen or compile recompiles everything; render does not).
COMPILER_MODULES = ("ntops_aot.aot.compile.variant",)
# Triton settings that are paths, not choices: they never change a cubin.
_PATH_SETTINGS = ("TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR")
# Settings Toolchain.target forces while it compiles, so a user's value never reaches
# the compiler: they are not part of any key.
_FORCED_SETTINGS = ("TRITON_DISABLE_LINE_INFO",)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class Keys:
    """Cache keys, for one build: sources are read once, and edits between builds
    are seen by the next one's `Keys`."""

    def __init__(self, environ: Mapping[str, str], compilers: Mapping[str, str]) -> None:
        """`compilers`: the toolchain's versions that reach a cubin (`Versions.compilers`)."""
        self.sources = fingerprint.Sources()
        self.toolchain = dict(compilers)
        self.triton_settings = {
            name: value
            for name, value in sorted(environ.items())
            if name.startswith("TRITON_") and name not in _PATH_SETTINGS + _FORCED_SETTINGS
        }

    def op(self, module: str) -> str:
        """The key of a kernel file's variant space."""
        sources = self.sources.fingerprint([module])
        return _digest({"format": FORMAT, "sources": sources, "toolchain": self.toolchain})

    def variant(
        self,
        variant: Variant,
        module: str,
        options: Mapping[str, Any],
        builds: Sequence[Any] = (),
    ) -> str:
        """The key of `variant`'s compiled kernels; `options` are the build options
        that reach the compiler (warps, stages), `builds` its configurations (so a
        changed tuning table recompiles exactly the variants whose winner changed)."""
        return _digest(
            {
                "format": FORMAT,
                "sources": self.sources.fingerprint([module, *COMPILER_MODULES]),
                "toolchain": self.toolchain,
                "triton_settings": self.triton_settings,
                "variant": variant.id,
                "widest": variant.widest,
                "options": dict(options),
                "builds": [
                    {**dataclasses.asdict(build), "config": build.config.as_dict()}
                    for build in builds
                ],
            }
        )


def extension_key(sources: Mapping[str, str], command: list[str], compiler: str) -> str:
    return _digest({"format": FORMAT, "sources": dict(sources), "command": command, "cc": compiler})


class Cache:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    @property
    def toolchain_dir(self) -> pathlib.Path:
        """Where Triton and ninetoothed keep their own caches during a build."""
        return self.root / "toolchain"

    def path(self, kind: str, key: str, suffix: str = ".pickle") -> pathlib.Path:
        return self.root / f"v{FORMAT}" / kind / key[:2] / f"{key}{suffix}"

    def load(self, kind: str, key: str) -> Any | None:
        """The entry, or None if there is none (or it cannot be read: it is rebuilt)."""
        path = self.path(kind, key)
        try:
            with path.open("rb") as file:
                return pickle.load(file)
        except FileNotFoundError:
            return None
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return None

    def store(self, kind: str, key: str, value: Any) -> None:
        write_atomic(self.path(kind, key), pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def has(self, kind: str, key: str, suffix: str = ".pickle") -> bool:
        return self.path(kind, key, suffix).is_file()


def write_atomic(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see all of it or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)
