"""A kernel's arguments as its declaration gives them: the premake's tensors, named by
the application's parameters, with what `SPACE` says of each (output, fixed, named
dims, broadcast). Code generation, the launcher's tables and the checks made when a
kernel file is loaded all read them from here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import UnsupportedKernel
from .space import VariantSpace


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument of the op's kernel, in `application` order."""

    name: str
    ndim: int  # 0: a scalar
    dtype: str  # ninetoothed's name: "fp16", "fp32", ...
    output: bool = False
    fixed: bool = False  # excluded from the runtime's dim coalescing
    specialized: bool = True  # may kernels assume unit strides or alignment for it
    dims: tuple[str | None, ...] = ()  # the names of its dims, where SPACE.dims names them
    broadcast: bool = False  # broadcasts to its named dims (SPACE.broadcast)
    descriptor: bool = False  # read through TMA descriptors by some kernels (SPACE.descriptors)

    @property
    def is_tensor(self) -> bool:
        return self.ndim > 0

    def spelled(self, switches: Mapping[str, str]) -> tuple[str | None, ...]:
        """Its dims as SPACE.dims spells them, with a variant's switch values in."""
        return tuple(None if dim is None else dim.format(**switches) for dim in self.dims)


def parameters(application: Callable[..., Any]) -> list[str]:
    """The application's parameter names, in order."""
    code = application.__code__
    return list(code.co_varnames[: code.co_argcount])


def arguments(
    op: str, space: VariantSpace, names: Sequence[str], tensors: Sequence[Any]
) -> tuple[Arg, ...]:
    """The call's arguments: every premake tensor (named by `names`) but the constexpr
    ones (constants compiled into the kernel), the workspace (the launcher's) and the
    launch id, none of which a caller passes."""
    if not set(space.outputs) & set(names):
        raise UnsupportedKernel(f"{op}: none of SPACE.outputs {space.outputs} is a parameter")
    return tuple(
        Arg(
            name=name,
            ndim=tensor.ndim,
            dtype=tensor.dtype,
            output=name in space.outputs,
            fixed=name in space.fixed,
            specialized=name not in space.unspecialized,
            dims=tuple(space.dims.get(name, ())),
            broadcast=name in space.broadcast,
            descriptor=name in space.descriptors,
        )
        for name, tensor in zip(names, tensors, strict=True)
        if not tensor.constexpr and name not in (space.workspace, space.launch_id)
    )


def own_dtype(group: str, index: int, kernels: Sequence[tuple[str, Sequence[Arg]]]) -> str | None:
    """The dtype argument `index` of a group always has (bool results), or None where
    it follows the call's (its first such tensor's): `kernels` are (the variant's dtype,
    in ninetoothed's name, its arguments) for each variant of the group."""
    arg = kernels[0][1][index]
    if not arg.is_tensor or all(args[index].dtype == dtype for dtype, args in kernels):
        return None
    seen = {args[index].dtype for _, args in kernels}
    if len(seen) > 1:
        raise UnsupportedKernel(
            f"{group}: argument {arg.name} has dtypes {sorted(seen)} across variants; "
            "a tensor either follows the call's dtype or has one dtype of its own"
        )
    return next(iter(seen))
