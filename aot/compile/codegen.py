"""The compile stage's first half: a variant's premake -> Triton source, one
`GeneratedKernel` per specialisation.

ninetoothed's code generator turns `arrangement` + `application` into a Triton
kernel whose parameters are each tensor's pointer, sizes and strides, plus the
scalars. This stage records, as data, which argument every parameter reads, the
launch grid as an expression over those parameters, and the Triton signature
each specialisation compiles with. It runs inside `toolchain.target`, so
ninetoothed's defaults come from the target arch, not from the build host; what it
uses of ninetoothed below its public surface goes through the toolchain's adapter.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import types
from collections.abc import Callable, Sequence
from typing import Any

from ..declare.arguments import Arg, parameters
from ..declare.plain import Plain
from ..declare.registry import OpDef
from ..declare.space import Config, Spec, Variant
from ..errors import UnsupportedKernel
from ..toolchain.compilers import Toolchain
from ..toolchain.ninetoothed_adapter import Ninetoothed, TensorNames
from ..toolchain.targets import TARGETS


@dataclasses.dataclass(frozen=True)
class Param:
    """One Triton kernel parameter and the argument value it is given (a "constant"
    is compiled in: `value`, from a constexpr tensor of the premake)."""

    name: str
    kind: str  # "pointer" | "size" | "stride" | "scalar" | "constant" | "workspace" | "launch"
    arg: int  # index into the kernel's `Arg`s (-1: constants, the workspace, the launch id)
    dim: int = -1
    value: int | bool | None = None


@dataclasses.dataclass(frozen=True)
class GeneratedKernel:
    variant: Variant
    spec: Spec
    args: tuple[Arg, ...]
    source: str  # a Python module holding the @triton.jit function `function`
    function: str
    params: tuple[Param, ...]  # every parameter, in the kernel's order
    signature: tuple[str, ...]  # Triton type per parameter, "constexpr" for unit strides
    divisible: tuple[int, ...]  # parameters compiled as multiples of 16
    grid: str  # number of programs: a Python expression over parameter names
    num_warps: int
    num_stages: int
    num_ctas: int = 1
    # Bytes of workspace the launcher allocates per program, and how many of them (per
    # program, from the start) it zeroes: the kernel file's `workspace(config)`.
    workspace: tuple[int, int] = (0, 0)

    @property
    def id(self) -> str:
        return f"{self.variant.id}/{self.spec.name}"


# The launcher's name for the GPU's multiprocessor count in grid expressions.
MULTIPROCESSORS = "multiprocessors"


def generate(
    toolchain: Toolchain,
    op: OpDef,
    variant: Variant,
    config: Config,
    keep: Callable[[Spec], bool] = lambda spec: True,
) -> list[GeneratedKernel]:
    """Generate the specialisations of `variant` that `keep` accepts, for its arch. A
    premake that takes `spec` is generated once per specialisation, any other once for
    all of them."""
    with toolchain.target(TARGETS[variant.arch]):
        return _generate(toolchain.ninetoothed, op, variant, config, keep)


def _generate(
    ninetoothed: Ninetoothed,
    op: OpDef,
    variant: Variant,
    config: Config,
    keep: Callable[[Spec], bool],
) -> list[GeneratedKernel]:
    default_warps, default_stages = ninetoothed.default_configs()
    num_warps = config.num_warps or default_warps
    num_stages = config.num_stages or default_stages
    function = f"ntops_{variant.op}"
    args = op.arguments(variant, config)
    generated: dict[Spec | None, Generation] = {}
    kernels = []
    for spec in specializations(op, variant, args):
        if not keep(spec):
            continue
        plain = op.plain(variant, config, spec)
        if plain is not None:
            found = _plain(ninetoothed, op, variant, config, spec, plain)
            source, entry = found.source, plain.name
        else:
            which = spec if op.premake_takes_spec else None
            if which not in generated:
                generated[which] = _ninetoothed(
                    ninetoothed, op, variant, config, function, (num_warps, num_stages), which
                )
            found = generated[which]
            source, entry = _module(found.source, spec.width), function
        params = _params(variant, found, op.space.workspace, op.space.launch_id)
        signature, divisible = _signature(spec, args, params)
        kernels.append(
            GeneratedKernel(
                variant=variant,
                spec=spec,
                args=args,
                source=source,
                function=entry,
                params=params,
                signature=signature,
                divisible=divisible,
                grid=_launched(found.grid, config),
                num_warps=num_warps,
                num_stages=num_stages,
                num_ctas=config.num_ctas,
                workspace=op.workspace(config),
            )
        )
    return kernels


def specs(
    op: OpDef,
    variant: Variant,
    config: Config,
    keep: Callable[[Spec], bool] = lambda spec: True,
) -> list[Spec]:
    """The specialisations `generate` would make (without generating them)."""
    args = op.arguments(variant, config)
    return [spec for spec in specializations(op, variant, args) if keep(spec)]


@dataclasses.dataclass(frozen=True)
class Generation:
    """What ninetoothed's code generator made of one premake."""

    names: Sequence[str]  # the application's parameters
    tensors: Sequence[Any]
    tensor_names: Sequence[TensorNames]  # each tensor's parameter names
    source: str
    kernel_params: Sequence[str]
    grid: str


def _premade(
    ninetoothed: Ninetoothed, op: OpDef, variant: Variant, config: Config, spec: Spec | None
) -> tuple[list[str], Sequence[Any], Callable[..., Any], Callable[..., Any]]:
    """The premake's parameter names, tensors, arrangement and application, its
    tensors named from zero (`reset_names`)."""
    ninetoothed.reset_names()
    arrangement, application, tensors = op.premake(variant, config, spec)
    return parameters(application), tensors, arrangement, application


def _ninetoothed(
    ninetoothed: Ninetoothed,
    op: OpDef,
    variant: Variant,
    config: Config,
    function: str,
    launch: tuple[int, int],
    spec: Spec | None,
) -> Generation:
    """Run ninetoothed's code generator as `ninetoothed.make` would, with `launch`'s
    warps and stages."""
    names, tensors, arrangement, application = _premade(ninetoothed, op, variant, config, spec)
    arranged = arrangement(*tensors)
    arranged = arranged if isinstance(arranged, tuple) else (arranged,)
    if len(names) != len(tensors) or len(arranged) != len(tensors):
        raise UnsupportedKernel(
            f"{variant.id}: application takes {len(names)} parameters, "
            f"premake gives {len(tensors)} tensors and arrangement returns {len(arranged)}"
        )
    # A copy of the application to annotate, as make() does, leaving the kernel file's alone.
    func = types.FunctionType(application.__code__, application.__globals__, application.__name__)
    func.__annotations__ = dict(zip(names, arranged, strict=True))
    made = ninetoothed.generate(func, function, *launch)
    if made.grid is None:
        raise UnsupportedKernel(f"{variant.id}: ninetoothed produced no launch grid")
    tensor_names = [ninetoothed.names(tensor) for tensor in tensors]
    return Generation(names, tensors, tensor_names, made.source, made.kernel_params, made.grid)


@dataclasses.dataclass(frozen=True)
class _Named:
    """A premake tensor as a plain kernel's parameters name it (the application's
    parameter name), or a constant of the `Plain`'s own."""

    name: str
    ndim: int
    constexpr: bool
    value: Any = None


def _plain(
    ninetoothed: Ninetoothed, op: OpDef, variant: Variant, config: Config, spec: Spec, plain: Plain
) -> Generation:
    """A `Plain` kernel in the premake's place: its parameters name the premake's
    tensors after the application's parameters (declare/plain.py), its grid is its own."""
    names, tensors, _, _ = _premade(ninetoothed, op, variant, config, spec)
    named = [
        _Named(name, tensor.ndim, bool(tensor.constexpr), getattr(tensor, "value", None))
        for name, tensor in zip(names, tensors, strict=True)
    ]
    clashing = sorted(set(plain.constants) & set(names))
    if clashing:
        raise UnsupportedKernel(
            f"{variant.id}: Plain.constants {clashing} are also the application's parameters"
        )
    extra = [(name, _Named(name, 0, True, value)) for name, value in plain.constants.items()]
    return Generation(
        names=[*names, *(name for name, _ in extra)],
        tensors=[*named, *(tensor for _, tensor in extra)],
        tensor_names=[
            TensorNames(
                name,
                tuple(f"{name}_size_{dim}" for dim in range(tensor.ndim)),
                tuple(f"{name}_stride_{dim}" for dim in range(tensor.ndim)),
            )
            for name, tensor in [*zip(names, named, strict=True), *extra]
        ],
        source=plain.source,
        kernel_params=list(plain.function.arg_names),
        grid=plain.grid,
    )


def _launched(grid: str, config: Config) -> str:
    """The grid a configuration launches, in programs (a program is a cluster of
    `num_ctas` blocks). Persistent: the tiles, but at most so many blocks per
    multiprocessor (the kernel loops over the tiles). Split: the tiles times the parts
    (`parts`, between 1 and `config.split`) that fill the last wave of programs (the
    kernel divides its work by them)."""
    slots = f"{MULTIPROCESSORS} // {config.num_ctas}" if config.num_ctas > 1 else MULTIPROCESSORS
    if config.persistent:
        return f"min({grid}, max(1, {slots} * {config.persistent}))"
    if config.split > 1:
        return f"({grid}) * parts({grid}, {slots}, {config.split})"
    return grid


def _module(source: str, width: int) -> str:
    """The module a kernel compiles from: ninetoothed's source, with 64-bit program ids
    for 64-bit kernels, and `tl` bound for the Triton helpers kernel files write (their
    source comes along verbatim, with Triton's customary alias)."""
    tree = ast.parse(widen_program_ids(source) if width == 64 else source)
    alias = ast.Import(names=[ast.alias(name="triton.language", asname="tl")])
    # ninetoothed appends the helpers in set order; sorted, the module is the same in
    # every process (the kernel keeps its place before them).
    kernel, *helpers = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    rest = [node for node in tree.body if not isinstance(node, ast.FunctionDef)]
    helpers.sort(key=lambda node: node.name)
    tree.body = [alias, *rest, kernel, *helpers]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def specializations(op: OpDef, variant: Variant, args: Sequence[Arg]) -> list[Spec]:
    """Most specialised first: the order in which the runtime tries them.

    64-bit indexing is built at the largest ndim built only: the runtime pads calls
    with fewer dims, and tensors past int32 are rare enough to take the slower kernel.
    """
    space = op.space
    unit_dims = op.unit_dims(variant)
    tensors = [arg for arg in args if arg.is_tensor]
    choices = [
        unit_dims.get(arg.name, (arg.ndim - 1,)) if arg.specialized else (None,) for arg in tensors
    ]
    combos = list(itertools.product(*choices))
    specs = []
    if space.specialized_ndims is None or variant.ndim <= space.specialized_ndims:
        if "aligned" in space.specs:
            specs += [Spec(32, combo, aligned=True) for combo in combos]
        if "unit" in space.specs:
            specs += [Spec(32, combo) for combo in combos]
    if "generic" in space.specs:
        specs.append(Spec(32))
    if space.coalesce == "none" or variant.widest:
        if "wide-aligned" in space.specs:
            specs += [Spec(64, combo, aligned=True) for combo in combos]
        if "wide" in space.specs:
            specs.append(Spec(64))
    return specs


def widen_program_ids(source: str) -> str:
    """Compute tile offsets in 64 bits: `program_id(0) * block` overflows int32 once a
    tensor has 2^31 elements, whatever the type of the sizes and strides."""

    class _Widen(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            if isinstance(node.func, ast.Attribute) and node.func.attr == "program_id":
                int64 = ast.parse("triton.language.int64", mode="eval").body
                to = ast.Attribute(value=node, attr="to", ctx=ast.Load())
                return ast.Call(func=to, args=[int64], keywords=[])
            return node

    tree = _Widen().visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _params(
    variant: Variant, found: Generation, workspace: str | None, launch_id: str | None
) -> tuple[Param, ...]:
    """What each kernel parameter is given: a call argument's pointer, size or stride,
    a scalar, a constant (constexpr tensors; the workspace's size and stride, which the
    kernel does not read: it lays the workspace out from its grid), the workspace, or
    the launch's id."""
    known: dict[str, Param] = {}
    passed = []
    named = zip(found.names, found.tensors, found.tensor_names, strict=True)
    for name, tensor, names in named:
        if tensor.constexpr:
            known[tensor.name] = Param(tensor.name, "constant", -1, value=tensor.value)
        elif name == launch_id:
            known[tensor.name] = Param(tensor.name, "launch", -1)
        elif name == workspace:
            known[names.pointer] = Param(names.pointer, "workspace", -1)
            for size, stride in zip(names.sizes, names.strides, strict=True):
                known[size] = Param(size, "constant", -1, value=0)
                known[stride] = Param(stride, "constant", -1, value=1)
        else:
            passed.append((tensor, names))
    for index, (tensor, names) in enumerate(passed):
        if tensor.ndim == 0:
            known[tensor.name] = Param(tensor.name, "scalar", index)
            continue
        known[names.pointer] = Param(names.pointer, "pointer", index)
        for dim in range(tensor.ndim):
            for kind, name in (("size", names.sizes[dim]), ("stride", names.strides[dim])):
                known[name] = Param(name, kind, index, dim)
    unknown = [name for name in found.kernel_params if name not in known]
    if unknown:
        raise UnsupportedKernel(
            f"{variant.id}: kernel parameters {unknown} are not a tensor's pointer, size, "
            "stride, a scalar or a constexpr tensor; an AOT kernel needs fixed block sizes "
            "(no meta symbols, no tiles sized by a runtime dim)"
        )
    return tuple(known[name] for name in found.kernel_params)


@dataclasses.dataclass(frozen=True)
class Assumption:
    """One fact a spec lets the compiler assume: a unit stride, a size or stride
    divisible by 16, or (dim -1) a 16-byte aligned data pointer. The runtime checks
    the same facts before it picks the kernel."""

    kind: str  # "unit" | "size16" | "stride16" | "aligned"
    arg: int
    dim: int = -1


def assumptions(spec: Spec, args: Sequence[Arg]) -> list[Assumption]:
    facts = []
    tensors = [index for index, arg in enumerate(args) if arg.is_tensor]
    for slot, index in enumerate(tensors):
        if not args[index].specialized:
            continue
        unit = spec.unit[slot] if spec.unit else None
        if unit is not None:
            facts.append(Assumption("unit", index, unit))
        if not spec.aligned:
            continue
        facts.append(Assumption("aligned", index))
        for dim in range(args[index].ndim):
            facts.append(Assumption("size16" if dim == unit else "stride16", index, dim))
    return facts


def _signature(
    spec: Spec, args: Sequence[Arg], params: Sequence[Param]
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    facts = {(fact.kind, fact.arg, fact.dim) for fact in assumptions(spec, args)}
    signature = []
    divisible = []
    for position, param in enumerate(params):
        if param.kind == "constant":
            signature.append("constexpr")
            continue
        if param.kind == "workspace":  # allocated by the launcher, 128-byte aligned
            signature.append("*i32")
            divisible.append(position)
            continue
        if param.kind == "launch":
            signature.append("i64")
            continue
        arg = args[param.arg]
        if param.kind == "scalar":
            signature.append(arg.dtype)
            continue
        if param.kind == "pointer":
            signature.append(f"*{arg.dtype}")
            key = ("aligned", param.arg, -1)
        elif param.kind == "stride" and ("unit", param.arg, param.dim) in facts:
            signature.append("constexpr")
            continue
        else:
            signature.append(f"i{spec.width}")
            key = (f"{param.kind}16", param.arg, param.dim)
        if key in facts:
            divisible.append(position)
    return tuple(signature), tuple(divisible)
