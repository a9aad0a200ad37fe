"""Stage 4 (package): compiled kernels -> the C sources of the extension.

The launcher itself is hand-written C (aot/csrc), copied as it is; jinja templates
render only what the build decides: the kernel tables, the cubin embedding and the
launcher's limits. This module only turns `CompiledKernel`s into the plain values
the tables are made of. Rendering is strict: a name a template uses and this module
does not give fails the build instead of printing nothing.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

from ..compile.codegen import MULTIPROCESSORS, assumptions
from ..compile.cubins import CompiledKernel
from ..declare.arguments import Arg, own_dtype
from ..declare.dims import Dim, named_dims
from ..declare.limits import (
    NT_MAX_ARGS,
    NT_MAX_DIMS,
    NT_MAX_FACTORS,
    NT_MAX_NAMES,
    NT_MAX_PARAMS,
    NT_SPECIALIZED_ARGS,
)
from ..declare.space import DTYPES
from ..errors import UnsupportedKernel
from ..toolchain import versions
from ..toolchain.targets import TARGETS
from . import cexpr

# The generated sources, each rendered from its template (`NAME.j2`).
TEMPLATES = ("generated.h", "kernels.c", "cubins.S")

_TYPES = {"i1": "NT_I1", "i32": "NT_I32", "i64": "NT_I64", "fp32": "NT_F32", "fp64": "NT_F64"}
_KINDS = {
    "pointer": "NT_POINTER",
    "size": "NT_SIZE",
    "stride": "NT_STRIDE",
    "scalar": "NT_SCALAR",
    "workspace": "NT_WORKSPACE",
    "launch": "NT_LAUNCH",
}
_SHORT = {dtype.triton: short for short, dtype in DTYPES.items()}  # ninetoothed's name -> ours
_COALESCE = {"all": "NT_COALESCE_ALL", "leading": "NT_COALESCE_LEADING", "none": "NT_COALESCE_NONE"}


@dataclasses.dataclass(frozen=True)
class GroupDef:
    """An op with its switches set, as the runtime addresses it (`gelu-approximate=tanh`);
    `bucket_keys` name the arguments and (negative) dims whose sizes pick a bucket."""

    key: str
    op: str
    coalesce: str
    in_place: bool
    bucket_keys: tuple[tuple[str, int], ...] = ()
    of: str | None = None  # an alias's: the group whose kernels it calls (listed before it)


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("ntops_aot.aot", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_extension(
    kernels: Sequence[CompiledKernel],
    groups: Sequence[GroupDef],
    cubin_paths: Mapping[str, pathlib.Path],
    ptx_paths: Mapping[str, pathlib.Path] | None = None,
) -> dict[str, str]:
    """The extension's sources by file name; `cubin_paths` maps kernel ids to files,
    `ptx_paths` the kernels shipped as PTX too (--ptx) to theirs."""
    ptx_paths = ptx_paths or {}
    dtypes = [
        {"torch_name": d.torch, "dlpack": d.dlpack[0] | d.dlpack[1] << 8 | 1 << 16}
        for d in DTYPES.values()
    ]
    dtype_index = {short: index for index, short in enumerate(DTYPES)}
    by_group: dict[str, list[CompiledKernel]] = {group.key: [] for group in groups}
    for kernel in kernels:
        by_group[kernel.variant.group].append(kernel)

    ordered: list[tuple[CompiledKernel, bool]] = []  # (kernel, as PTX)
    group_values = []
    by_key: dict[str, dict[str, Any]] = {}
    for group in groups:
        if group.of is not None:  # an alias: another name for a group's kernels
            group_values.append(by_key[group.of] | {"key": group.key, "op": group.op})
            continue
        members = sorted(
            by_group[group.key],
            # Stable: within a variant, specs keep codegen's most-specialised-first order.
            key=lambda k: (k.variant.arch, dtype_index[k.variant.dtype], k.variant.ndim),
        )
        names = _names(group, members)
        by_key[group.key] = {
            "key": group.key,
            "op": group.op,
            "coalesce": _COALESCE[group.coalesce],
            "in_place": int(group.in_place),
            "args": _args(group, members, dtype_index, names),
            "names": [dim.name for dim in names],
            "sizes": [dim.size for dim in names],
            "derived": [
                list(dim.factors) + [0] * (NT_MAX_FACTORS - len(dim.factors)) for dim in names
            ],
            "bucket_keys": _bucket_keys(group, members),
            "first_kernel": len(ordered),
            "num_kernels": len(members) + sum(k.id in ptx_paths for k in members),
        }
        group_values.append(by_key[group.key])
        # PTX after every cubin: the launcher falls back to it only where no cubin runs.
        ordered.extend((kernel, False) for kernel in members)
        ordered.extend((kernel, True) for kernel in members if kernel.id in ptx_paths)

    grids: dict[str, str] = {}
    images: dict[pathlib.Path, str] = {}  # one embedded copy of each distinct image
    kernel_values = []
    for kernel, ptx in ordered:
        expression = _grid(kernel)
        name = grids.setdefault(expression, f"nt_grid_{len(grids)}")
        path = ptx_paths[kernel.id] if ptx else cubin_paths[kernel.id]
        symbol = images.setdefault(path, f"nt_image_{len(images)}")
        kernel_values.append(_kernel(kernel, name, dtype_index, symbol, ptx))

    values = {
        "version": versions.read().ntops_aot,
        "limits": {
            "args": NT_MAX_ARGS,
            "dims": NT_MAX_DIMS,
            "params": NT_MAX_PARAMS,
            "names": NT_MAX_NAMES,
            "factors": NT_MAX_FACTORS,
        },
        "kernels": kernel_values,
        "images": [{"symbol": symbol, "path": str(path)} for path, symbol in images.items()],
        "groups": group_values,
        "grids": [{"name": name, "expression": expr} for expr, name in grids.items()],
        "dtypes": dtypes,
        "targets": [
            {"capability": t.capability, "multiprocessors": t.multiprocessor_count}
            for t in TARGETS.values()
        ],
    }
    env = environment()
    rendered = {name: env.get_template(f"{name}.j2").render(values) for name in TEMPLATES}
    return {**launcher_sources(), **rendered}


def launcher_sources() -> dict[str, str]:
    """The hand-written C of the launcher by file name, to be compiled beside the
    rendered files (so the extension's cache key covers it too)."""
    folder = importlib.resources.files("ntops_aot.aot") / "csrc"
    return {
        entry.name: entry.read_text()
        for entry in sorted(folder.iterdir(), key=lambda entry: entry.name)
        if entry.name.endswith((".c", ".h"))
    }


def _args(
    group: GroupDef,
    members: Sequence[CompiledKernel],
    dtype_index: Mapping[str, int],
    names: Sequence[Dim],
) -> list[dict[str, object]]:
    """Each argument's flags, dtype rule and named dims. The rule is -1 for the call's
    dtype (that of its first such tensor), or the index of the one dtype it always has
    (bool results); each dim is the index of its name in `names`, or -1 (unnamed; a
    coalesced tensor's trailing names come first, then -1s)."""
    if not members:
        return []
    values = []
    position = {dim.spelled: n for n, dim in enumerate(names)}
    kinds = [(DTYPES[kernel.variant.dtype].triton, kernel.args) for kernel in members]
    switches = dict(members[0].variant.switches)
    for index, arg in enumerate(members[0].args):
        flags = []
        if arg.is_tensor:
            flags.append("NT_TENSOR")
            if arg.output:
                flags.append("NT_OUTPUT")
            if arg.fixed or group.coalesce == "none":
                flags.append("NT_FIXED")
            if arg.broadcast:
                flags.append("NT_BROADCAST")
            if arg.descriptor:
                flags.append("NT_DESCRIBED")
        own = own_dtype(group.key, index, kinds)
        rule = (
            -1
            if own is None
            else next(dtype_index[d.short] for d in DTYPES.values() if d.triton == own)
        )
        dims = [-1 if dim is None else position[dim] for dim in arg.spelled(switches)]
        values.append(
            {
                "name": arg.name,
                "flags": " | ".join(flags) or "0",
                "ndim": arg.ndim,
                "dtype": rule,
                "dims": dims + [-1] * (NT_MAX_DIMS - len(dims)),
            }
        )
    return values


def _names(group: GroupDef, members: Sequence[CompiledKernel]) -> list[Dim]:
    """The group's named dims, checked as the registry checked them on load."""
    if not members:
        return []
    switches = dict(members[0].variant.switches)
    return named_dims(group.key, group.coalesce, members[0].args, switches)


def _position(arg: Arg, dim: int) -> int:
    """Where the launcher stores `dim` of this argument (NT_DIM in csrc/ntops.h)."""
    return NT_MAX_DIMS - arg.ndim + dim


def _bucket_keys(group: GroupDef, members: Sequence[CompiledKernel]) -> list[dict[str, int]]:
    """Which stored sizes of which arguments pick a call's bucket, always two (arg -1:
    none, the size 0)."""
    keys = []
    for name, dim in group.bucket_keys if members else ():
        args = members[0].args
        index = next((i for i, arg in enumerate(args) if arg.name == name), None)
        if index is None or not -args[index].ndim <= dim < 0:
            raise UnsupportedKernel(
                f"{group.key}: TUNING key {(name, dim)} is not a negative dim of an argument"
            )
        keys.append({"arg": index, "pos": _position(args[index], args[index].ndim + dim)})
    return keys + [{"arg": -1, "pos": 0}] * (2 - len(keys))


def _grid(kernel: CompiledKernel) -> str:
    names = {
        param.name: f"NT_SIZE(call, {param.arg}, {_position(kernel.args[param.arg], param.dim)})"
        for param in kernel.params
        if param.kind == "size"
    }
    names[MULTIPROCESSORS] = "(int64_t)call->multiprocessors"
    return cexpr.to_c(kernel.grid, names)


def _kernel(
    kernel: CompiledKernel,
    grid: str,
    dtype_index: Mapping[str, int],
    symbol: str,
    ptx: bool,
) -> dict[str, object]:
    needs = {"unit": 0, "size16": 0, "stride16": 0, "aligned": 0}
    for fact in assumptions(kernel.spec, kernel.args):
        if fact.kind == "aligned":
            needs["aligned"] |= 1 << fact.arg
        elif fact.arg >= NT_SPECIALIZED_ARGS:
            raise UnsupportedKernel(
                f"{kernel.id}: argument {fact.arg} is specialised; only the first "
                f"{NT_SPECIALIZED_ARGS} can be (list later ones in SPACE.unspecialized)"
            )
        else:
            bit = fact.arg * NT_MAX_DIMS + _position(kernel.args[fact.arg], fact.dim)
            needs[fact.kind] |= 1 << bit
    params = []
    for param, type_ in zip(kernel.params, kernel.types, strict=True):
        at = _position(kernel.args[param.arg], param.dim) if param.dim >= 0 else 0
        params.append(
            {
                "kind": _KINDS[param.kind],
                "arg": max(param.arg, 0),  # the workspace and launch id (-1) are no argument
                "dim": at,
                "type": "NT_PTR" if type_.startswith("*") else _TYPES[type_],
            }
        )
    if len(kernel.args) > NT_MAX_ARGS or len(params) + kernel.scratch_params > NT_MAX_PARAMS:
        raise UnsupportedKernel(
            f"{kernel.id}: {len(kernel.args)} arguments and {len(params)} parameters; the "
            f"launcher takes at most {NT_MAX_ARGS} and {NT_MAX_PARAMS}"
        )
    return {
        "id": f"{kernel.id}+ptx" if ptx else kernel.id,
        "function": kernel.function,
        "symbol": symbol,
        "capability": int(kernel.variant.arch.removeprefix("sm_")),
        "exact": int(kernel.target.endswith("a")),
        "ptx": int(ptx),
        "dtype": dtype_index[kernel.variant.dtype],
        "ndim": kernel.variant.ndim,
        "width": kernel.spec.width,
        "num_warps": kernel.num_warps,
        "num_ctas": kernel.num_ctas,
        "shared": kernel.shared,
        "scratch": kernel.scratch,
        "scratch_align": kernel.scratch_align,
        "workspace": kernel.workspace[0],
        "workspace_zeroed": kernel.workspace[1],
        "bucket": kernel.bucket,
        "candidate": kernel.candidate,
        "needs": needs,
        "grid": grid,
        "params": params,
        "num_scratch": kernel.scratch_params,
    }
