"""Kernels written by hand: a kernel file's `plain(variant, config, spec)` may return a
`Plain` for a specialisation, and the build compiles that Triton or Gluon function in
place of the kernel ninetoothed would generate from the premake. Everything else is
the premake's: the arguments a call passes (its tensors), the configuration and its
tuning, the launcher and its checks. For what ninetoothed cannot express (explicit warp
specialisation, mbarriers, Gluon's layouts), and for users who already have a kernel.

The function's parameters are named after the application's: a tensor argument `x`
is `x` (its data pointer), `x_size_<d>` and `x_stride_<d>`; a scalar and a constexpr
tensor keep their names; `Plain.constants` adds compile-time values of its own. A
function takes the ones it reads, in any order. Unit strides the specialisation
guarantees arrive as the constexpr 1 (aot/compile/codegen.py's `_signature`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Plain:
    """A kernel for one specialisation: `function` (`@triton.jit` or `@gluon.jit`, defined
    at a module's top level: the build compiles it from its module's source), its launch
    grid as a number of programs (an integer expression over its size parameters: +, -,
    *, //, %, min, max; `multiprocessors`), and constants for its constexpr parameters
    that no premake tensor gives."""

    function: Any
    grid: str
    constants: Mapping[str, int | bool] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not hasattr(self.function, "arg_names"):
            raise TypeError(f"Plain: {self.function!r} is not a @triton.jit or @gluon.jit function")

    @property
    def name(self) -> str:
        return str(self.function.__name__)

    @property
    def source(self) -> str:
        """The source of the function's module, which the build compiles it from; its
        package set first, so that its relative imports resolve where the build runs it."""
        import inspect
        import sys

        module = sys.modules[self.function.__module__]
        return f"__package__ = {module.__package__!r}\n" + inspect.getsource(module)
