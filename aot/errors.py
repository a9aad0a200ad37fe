"""Typed failures of a build. Each says what was wrong, what exists, and how to fix
it; the CLI exits with each kind's own code (README, "Exit codes"):

  0 the wheel(s) written        4 variants failed to compile: no wheel
  1 an unexpected error         5 the C compiler failed on the launcher
  2 a bad command line          6 shards that do not merge
  3 a bad setting (environment, 7 not an ntops_prebuilt wheel (inspect)
    pyproject.toml, toolchain)  8 --keep-going: wheel written, some variants missing
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


class BuildError(Exception):
    """Base of every failure the toolchain reports to a user."""

    exit_code = 1


class UsageError(BuildError):
    """Asked for something that does not exist (op, arch, dtype, ndim, option value)."""

    exit_code = 2


class ConfigError(BuildError):
    """A setting from the environment or pyproject.toml is not valid."""

    exit_code = 3


class ToolchainError(ConfigError):
    """The installed toolchain is not the one ntops-aot is written against (a
    ninetoothed other than the pinned version): a bad environment."""


class TuningError(BuildError):
    """A tuning table that cannot be used as it is, or a tuning run that cannot run."""

    exit_code = 3


class UnsupportedKernel(BuildError):
    """A kernel definition the AOT pipeline cannot build as written."""

    exit_code = 4


class CompileError(BuildError):
    """Triton failed on one kernel, or the kernel needs what a prebuilt launch cannot give."""

    exit_code = 4

    def __init__(self, kernel_id: str, reason: str) -> None:
        # No reproducer here: the build attaches its variant's (`plan.reproduce`), which
        # knows the options the kernel was compiled with.
        self.kernel_id = kernel_id
        self.reason = reason
        super().__init__(f"{kernel_id}: {reason}")


@dataclasses.dataclass(frozen=True)
class VariantFailure:
    """One variant that produced no kernels: its id, what happened, how to rerun it."""

    variant: str
    kind: str  # "error", "timeout", "memory" or "crash"
    message: str
    reproduce: str

    def describe(self) -> str:
        return (
            f"{self.variant} ({self.kind}): {self.message.strip()}\n  reproduce: {self.reproduce}"
        )


class VariantsFailed(BuildError):
    """Some variants failed to compile and --keep-going was not given: no wheel."""

    exit_code = 4

    def __init__(self, failures: Sequence[VariantFailure], total: int) -> None:
        self.failures = list(failures)
        listed = "\n".join(failure.describe() for failure in self.failures)
        super().__init__(
            f"{len(self.failures)} of {total} variants failed; no wheel was written "
            f"(--keep-going writes one without them):\n{listed}"
        )


class ExtensionBuildError(BuildError):
    """The C compiler failed on the generated launcher."""

    exit_code = 5


class MergeError(BuildError):
    """Shard outputs that do not make one build: missing, repeated or mismatched."""

    exit_code = 6


class NotAWheel(BuildError):
    """`inspect` was given something that is not an ntops_prebuilt wheel."""

    exit_code = 7


PARTIAL_EXIT_CODE = 8  # --keep-going wrote a wheel without the variants that failed
