"""Which source files a build product depends on, found without importing anything.

A kernel file's compiled cubins depend on that file, on every project module it
imports (shared tilings such as `element_wise`, `aot/declare/space.py`), and on the modules
that turn it into cubins (`aot/compile/variant.py` and what it imports). Reading the import
statements (`ast`) gives that closure exactly, so editing a shared tiling changes
the fingerprint of the ops that import it and of no others, and no fingerprint
needs ninetoothed, Triton or torch to be imported (a no-change rebuild stays fast).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import pathlib
from collections.abc import Iterable

PROJECT = "ntops_aot"


@functools.cache
def _package_dir(package: str) -> pathlib.Path | None:
    """Where a project package's files are (the source tree in an editable install)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(next(iter(spec.submodule_search_locations)))


def module_file(name: str) -> pathlib.Path | None:
    """The file of project module `name` (`ntops_aot.kernels.element_wise`), if it is one."""
    parts = name.split(".")
    if parts[0] != PROJECT or len(parts) < 2:
        return None
    package = _package_dir(".".join(parts[:2]))
    if package is None:
        return None
    path = package.joinpath(*parts[2:])
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path: pathlib.Path, module: str) -> set[str]:
    """Dotted names `path` (module `module`) may import: each `import a.b` and each
    `from a import b` as both `a` and `a.b` (b may be a module or a name in a)."""
    is_package = path.name == "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                parent = parent[: len(parent) - node.level + is_package]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
    for name in list(names):
        parts = name.split(".")
        names.update(".".join(parts[:i]) for i in range(2, len(parts)))
    return names


class Sources:
    """Closures and fingerprints of project modules. Each file is read and parsed once
    per instance: make one per build, so edits between builds are seen."""

    def __init__(self) -> None:
        self._imports: dict[str, tuple[pathlib.Path | None, set[str]]] = {}
        self._digests: dict[pathlib.Path, str] = {}

    def closure(self, modules: Iterable[str]) -> dict[str, pathlib.Path]:
        """Every project module that importing `modules` executes, by name."""
        found: dict[str, pathlib.Path] = {}
        pending = list(modules)
        while pending:
            name = pending.pop()
            if name in found:
                continue
            path, imported = self._read(name)
            if path is None:
                continue
            found[name] = path
            pending.extend(imported - found.keys())
        return found

    def fingerprint(self, modules: Iterable[str]) -> str:
        """sha256 over the names and contents of `closure(modules)`."""
        digest = hashlib.sha256()
        for name, path in sorted(self.closure(modules).items()):
            digest.update(f"{name}\0{self._digest(path)}\0".encode())
        return digest.hexdigest()

    def _read(self, name: str) -> tuple[pathlib.Path | None, set[str]]:
        if name not in self._imports:
            path = module_file(name)
            self._imports[name] = (path, _imported_modules(path, name) if path else set())
        return self._imports[name]

    def _digest(self, path: pathlib.Path) -> str:
        if path not in self._digests:
            self._digests[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        return self._digests[path]
