"""Typed failures of a build. Each says what was wrong, what exists, and how to fix
it; the CLI maps each kind to its own exit code."""

from __future__ import annotations


class BuildError(Exception):
    """Base of every failure the toolchain reports to a user."""

    exit_code = 1


class UsageError(BuildError):
    """Asked for something that does not exist (op, arch, dtype, ndim)."""

    exit_code = 2


class UnsupportedKernel(BuildError):
    """A kernel definition the AOT pipeline cannot build as written."""

    exit_code = 3


class CompileError(BuildError):
    """Triton failed on one kernel, or the kernel needs what a prebuilt launch cannot give."""

    exit_code = 4

    def __init__(self, kernel_id: str, reason: str, reproduce: str) -> None:
        self.kernel_id = kernel_id
        self.reason = reason
        self.reproduce = reproduce
        super().__init__(f"{kernel_id}: {reason}\n  reproduce alone: {reproduce}")


class ExtensionBuildError(BuildError):
    """The C compiler failed on the generated launcher."""

    exit_code = 5
