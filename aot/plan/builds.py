"""What a plan asks the compile stage for, per variant: its configurations (`Build`)
and the build options that reach the compiler (`CompileOptions`). Both are part of a
variant's cache key."""

from __future__ import annotations

import dataclasses

from ..declare.space import EVERY, Config, Range


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """Build options that reach the compiler: part of every kernel's cache key."""

    num_warps: int | None = None
    num_stages: int | None = None


@dataclasses.dataclass(frozen=True)
class Build:
    """One configuration of a variant to compile: the specialisations it is built for
    (`aligned`: those assuming 16-byte alignment, or the others, or None for all;
    `specs`: only these names, if any), the sizes of the bucket keys its kernels serve, and
    the label their ids carry (`@decode`, `@prefill#2` for a tuning candidate)."""

    config: Config
    bucket: tuple[Range, Range] = (EVERY, EVERY)
    label: str = ""
    aligned: bool | None = None
    specs: tuple[str, ...] = ()
    candidate: int = 0
