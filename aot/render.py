"""Stage 4: compiled kernels -> the C sources of the extension.

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
import re
from collections.abc import Mapping, Sequence

import jinja2

from ntops_aot.aot import cexpr, versions
from ntops_aot.aot.codegen import MULTIPROCESSORS, Arg, assumptions
from ntops_aot.aot.compile import CompiledKernel
from ntops_aot.aot.errors import UnsupportedKernel
from ntops_aot.aot.space import DTYPES
from ntops_aot.aot.targets import TARGETS

# The generated sources, each rendered from its template (`NAME.j2`).
TEMPLATES = ("generated.h", "kernels.c", "cubins.S")
# The launcher's limits (generated.h is rendered with them). Attention with a KV
# cache's new entries and a causal offset takes 9 arguments.
NT_MAX_DIMS = 8
NT_MAX_ARGS = 12
NT_MAX_PARAMS = 64
NT_MAX_NAMES = 12  # named dims of one group (SPACE.dims): attention has 7
NT_MAX_FACTORS = 4  # of a derived dim ("heads_q/heads_kv*seq_q")

_TYPES = {"i1": "NT_I1", "i32": "NT_I32", "i64": "NT_I64", "fp32": "NT_F32", "fp64": "NT_F64"}
_KINDS = {
    "pointer": "NT_POINTER",
    "size": "NT_SIZE",
    "stride": "NT_STRIDE",
    "scalar": "NT_SCALAR",
    "workspace": "NT_WORKSPACE",
    "launch": "NT_LAUNCH",
}
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
    for group in groups:
        members = sorted(
            by_group[group.key],
            # Stable: within a variant, specs keep codegen's most-specialised-first order.
            key=lambda k: (k.variant.arch, dtype_index[k.variant.dtype], k.variant.ndim),
        )
        names = _names(group, members)
        group_values.append(
            {
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
        )
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
        seen = {kernel.args[index].dtype for kernel in members}
        follows = all(k.args[index].dtype == DTYPES[k.variant.dtype].triton for k in members)
        if not arg.is_tensor or follows:
            rule = -1
        elif len(seen) == 1:
            (triton,) = seen
            rule = next(dtype_index[d.short] for d in DTYPES.values() if d.triton == triton)
        else:
            raise UnsupportedKernel(
                f"{group.key}: argument {arg.name} has dtypes {sorted(seen)} across variants; "
                "a tensor either follows the call's dtype or has one dtype of its own"
            )
        dims = [-1 if dim is None else position[dim] for dim in _spelled(arg, members[0])]
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


@dataclasses.dataclass(frozen=True)
class Dim:
    """A named dim of a group, as the launcher checks it. SPACE.dims spells each dim
    of a tensor as None (unnamed), a name ("rows": dims of one name have one size in a
    call), a name with the size the variant was compiled for ("head_dim={head_dim}",
    formatted with the variant's switches: a call of another size is refused), or, on
    an output, a product and quotient of names ("heads_q/heads_kv*seq_q", evaluated
    left to right; a quotient that is not whole is refused)."""

    name: str  # for messages
    spelled: str  # as SPACE.dims spells it, switches formatted in
    size: int = 0  # the compiled-in size; 0: none
    factors: tuple[int, ...] = ()  # derived: k + 1 multiplies by name k, -(k + 1) divides


_DERIVED = re.compile(r"[*/]")


def _spelled(arg: Arg, kernel: CompiledKernel) -> tuple[str | None, ...]:
    """`arg`'s dims as SPACE.dims spells them, with the variant's switch values in."""
    variant = getattr(kernel, "variant", None)
    switches = dict(variant.switches) if variant is not None else {}
    return tuple(None if dim is None else dim.format(**switches) for dim in arg.dims)


def _names(group: GroupDef, members: Sequence[CompiledKernel]) -> list[Dim]:
    """The group's named dims (SPACE.dims), in order of first use, derived ones last;
    checked as the launcher needs them: a name per dim on tensors it does not coalesce,
    trailing names only on those it coalesces (coalesce="leading" keeps the last dims),
    dims of an input that broadcasts named by the tensors it broadcasts against, and
    derived dims on outputs, of names the inputs bind."""
    args = members[0].args if members else ()
    plain: dict[str, Dim] = {}
    derived: list[str] = []
    bound: set[str] = set()
    for arg in (arg for arg in args if arg.dims):
        for spelled in _checked_dims(group, arg, members[0]):
            if _DERIVED.search(spelled):
                derived.append(spelled)
                continue
            name, _, size = spelled.partition("=")
            dim = Dim(name, spelled, int(size) if size else 0)
            if size and dim.size <= 0:
                raise UnsupportedKernel(f"{group.key}: {spelled!r} is not a positive size")
            known = next((d for d in plain.values() if d.name == name), None)
            if known is not None and known.spelled != spelled:
                raise UnsupportedKernel(
                    f"{group.key}: dim {name} is spelled {known.spelled!r} and {spelled!r}"
                )
            plain.setdefault(spelled, dim)
            if not arg.broadcast or dim.size:
                bound.add(spelled)
    unbound = set(plain) - bound
    if unbound:
        raise UnsupportedKernel(
            f"{group.key}: dims {sorted(unbound)} are named only by inputs that broadcast "
            "(SPACE.broadcast); name them on a tensor those inputs broadcast against"
        )
    names = list(plain.values())
    names += [_derived(group, spelled, names) for spelled in dict.fromkeys(derived)]
    if len(names) > NT_MAX_NAMES:
        raise UnsupportedKernel(
            f"{group.key}: {len(names)} named dims; the launcher takes at most {NT_MAX_NAMES}"
        )
    return names


def _checked_dims(group: GroupDef, arg: Arg, kernel: CompiledKernel) -> list[str]:
    """`arg`'s spelled dims, less the unnamed ones, where the launcher can check them."""
    coalesced = not (arg.fixed or group.coalesce == "none")
    if coalesced and group.coalesce != "leading":
        raise UnsupportedKernel(
            f"{group.key}: SPACE.dims names the dims of {arg.name}, which the launcher "
            "coalesces; only tensors it does not (coalesce='none', SPACE.fixed) have them, "
            "and trailing dims where it coalesces the leading ones"
        )
    if len(arg.dims) > arg.ndim or (not coalesced and len(arg.dims) != arg.ndim):
        raise UnsupportedKernel(
            f"{group.key}: SPACE.dims gives {arg.name} {len(arg.dims)} names for its "
            f"{arg.ndim} dims"
        )
    spelled = _spelled(arg, kernel)
    if coalesced and None in spelled:
        raise UnsupportedKernel(f"{group.key}: {arg.name} names its trailing dims: each has a name")
    derived = [dim for dim in spelled if dim is not None and _DERIVED.search(dim)]
    if derived and (not arg.output or coalesced):
        raise UnsupportedKernel(
            f"{group.key}: {arg.name}'s dim {derived[0]!r} is derived: only outputs "
            "the launcher does not coalesce have derived dims"
        )
    return [dim for dim in spelled if dim is not None]


def _derived(group: GroupDef, spelled: str, names: Sequence[Dim]) -> Dim:
    """A derived dim: its names, each bound by an input, multiplied or divided."""
    tokens = [token.strip() for token in re.split(r"([*/])", spelled)]
    operands, operators = tokens[::2], ["*", *tokens[1::2]]
    index = {dim.name: n for n, dim in enumerate(names)}
    missing = [name for name in operands if name not in index]
    if missing or len(operands) > NT_MAX_FACTORS:
        raise UnsupportedKernel(
            f"{group.key}: derived dim {spelled!r} takes at most {NT_MAX_FACTORS} names, "
            f"each bound by an input (not {missing})"
        )
    factors = tuple(
        (index[name] + 1) * (1 if operator == "*" else -1)
        for name, operator in zip(operands, operators, strict=True)
    )
    return Dim(spelled, spelled, 0, factors)


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
