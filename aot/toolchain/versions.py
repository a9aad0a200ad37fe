"""The toolchain's versions, read in this one place.

A wheel records them (manifest.json, the WHEEL file, the launcher's C), cache keys
and shard files hash what reaches a cubin, merges and tuning tables compare them,
and the ninetoothed adapter checks ninetoothed's against the pin. Everything is read
from package metadata or the C compiler's `--version`: nothing is imported.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import subprocess
import sysconfig
from importlib import metadata

PROJECT = "ntops-aot"


def installed(name: str) -> str:
    """The installed version of distribution `name`."""
    return metadata.version(name)


def pinned(name: str) -> str | None:
    """The version of `name` that ntops-aot pins (`name==X` in pyproject.toml's
    dependencies, as installed), or None if it pins none."""
    for requirement in metadata.requires(PROJECT) or ():
        project, _, version = requirement.partition("==")
        if project.strip() == name and version and ";" not in version:
            return version.strip()
    return None


def compiler() -> str:
    """The C compiler that builds the launcher."""
    return os.environ.get("CC") or sysconfig.get_config_var("CC").split()[0] or "cc"


@functools.cache
def compiler_version() -> str:
    try:
        run = subprocess.run([compiler(), "--version"], capture_output=True, text=True, check=True)
        return run.stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


@dataclasses.dataclass(frozen=True)
class Versions:
    ntops_aot: str
    ninetoothed: str
    triton: str
    python: str  # major.minor.patch
    cc: str  # the first line of the C compiler's --version

    def compilers(self) -> dict[str, str]:
        """What decides a cubin: hashed into every cache key, recorded in shard files and
        tuning tables. Python's patch release and the C compiler do not (the launcher's
        key hashes the compiler itself)."""
        major_minor = ".".join(self.python.split(".")[:2])
        return {"ninetoothed": self.ninetoothed, "triton": self.triton, "python": major_minor}

    def as_dict(self) -> dict[str, str]:
        """As a wheel's manifest records them."""
        return {
            PROJECT: self.ntops_aot,
            "ninetoothed": self.ninetoothed,
            "triton": self.triton,
            "python": self.python,
            "cc": self.cc,
        }


def read() -> Versions:
    """The versions of this toolchain."""
    return Versions(
        ntops_aot=installed(PROJECT),
        ninetoothed=installed("ninetoothed"),
        triton=installed("triton"),
        python=platform.python_version(),
        cc=compiler_version(),
    )
