"""The vocabulary of fuzz cases (tests/gpu/fuzz.py): what a case is, how it is built
on a device and how it is shown (tests/gpu/fuzz_draw.py draws them).

A case's tensors are views of bases drawn on the CPU from (seed, index) alone, then
copied to the device for each run, so a case is the same on any machine. A view is a
chain of steps (slices with steps and offsets, a permutation, an expansion, a negative
bit) replayed on the copy, and a base's elements outside every view hold a sentinel
(NaN, or an unlikely integer), so a kernel that reads past a view reads it.
"""

import dataclasses
import math

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.subclasses import Wrapper

FLOATS = (torch.float16, torch.bfloat16, torch.float32)
INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
BOOL = (torch.bool,)
DTYPES = FLOATS + INTEGERS + BOOL


@dataclasses.dataclass(frozen=True, eq=False)
class Base:
    """A tensor's memory as a case begins: CPU values, copied to the device for each
    run, or kept on the CPU (0-dim operands, which torch lets meet CUDA tensors)."""

    values: torch.Tensor
    on_cpu: bool = False


@dataclasses.dataclass(frozen=True)
class Operand:
    """A tensor argument: base `base` viewed through `steps`, then maybe wrapped
    ("subclass": a __torch_dispatch__ wrapper; "fake": a FakeTensor)."""

    base: int
    steps: tuple = ()
    wrap: str | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class Case:
    """One call of one op, as `make_case` drew it; `outside` says why the call is
    outside what the op is built for (where a clean refusal is allowed)."""

    seed: int
    index: int
    op: str
    dtype: torch.dtype  # the input's: the op's built space is checked against it
    bases: tuple
    args: tuple
    kwargs: dict
    shapes: dict  # Operand -> (shape, dtype)
    notes: tuple
    outside: tuple
    precision: str = "highest"  # torch.get_float32_matmul_precision() during the call


def numel(shape):
    return math.prod(shape)


def contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def apply(tensor, step):
    """One view step of an Operand."""
    kind, *rest = step
    if kind == "slice":
        dim, start, stop, every = rest
        return tensor[(slice(None),) * dim + (slice(start, stop, every),)]
    if kind == "permute":
        return tensor.permute(*rest[0])
    if kind == "expand":
        return tensor.expand(*rest[0])
    if kind == "as_strided":
        return tensor.as_strided(*rest)
    if kind == "neg":
        return torch._neg_view(tensor)
    if kind == "imag":  # a real view with the negative bit set
        return tensor.conj().imag
    if kind == "complex":  # a float (..., 2) tensor's pairs as complex numbers
        return torch.view_as_complex(tensor)
    if kind == "conj":  # a complex view with the conjugate bit set
        return tensor.conj()
    raise ValueError(f"unknown view step {step!r}")


def materialize(case, device, resolved=False):
    """The case's (args, kwargs) with fresh copies of its tensors on `device`; an
    Operand used twice is the same tensor object twice. `resolved`: a subclass wraps
    its tensor's values with negative and conjugate bits resolved, for torch's answer:
    torch's own ops on a wrapper of a negative view read its memory un-negated (torch
    2.11, H100: div(Wrapper(x._neg_view()), -1.5) gave x / -1.5)."""
    bases = [b.values.to("cpu" if b.on_cpu else device, copy=True) for b in case.bases]
    made, modes = {}, []

    def build(operand):
        tensor = bases[operand.base]
        for step in operand.steps:
            tensor = apply(tensor, step)
        if operand.wrap == "subclass":
            return Wrapper(tensor.resolve_neg().resolve_conj() if resolved else tensor)
        if operand.wrap == "fake":
            modes[:] = modes or [FakeTensorMode(allow_non_fake_inputs=True)]
            return modes[0].from_tensor(tensor)
        return tensor

    def resolve(value):
        if isinstance(value, Operand):
            if value not in made:
                made[value] = build(value)
            return made[value]
        if isinstance(value, (tuple, list)):
            return type(value)(resolve(item) for item in value)
        return value

    return resolve(case.args), {name: resolve(value) for name, value in case.kwargs.items()}


def describe(case):
    """The case for a reader: each tensor's dtype, shape and how it is laid out, the
    call, and what is unusual about it."""
    names = {}
    for operand in _operands((case.args, case.kwargs)):
        names.setdefault(operand, f"t{len(names)}")
    lines = [f"{case.op}: seed {case.seed}, case {case.index}"]
    for operand, name in names.items():
        shape, dtype = case.shapes[operand]
        base = case.bases[operand.base]
        where = " on the CPU" if base.on_cpu else ""
        steps = "".join(_step_text(step) for step in operand.steps)
        wrap = f", wrapped as a {operand.wrap} tensor" if operand.wrap else ""
        lines.append(
            f"  {name}: {_short(dtype)}{list(shape)}{where} = "
            f"base{operand.base}{list(base.values.shape)}{steps}{wrap}"
        )

    def text(value):
        if isinstance(value, Operand):
            return names[value]
        if isinstance(value, (tuple, list)):
            return repr(type(value)(text(item) for item in value)).replace("'", "")
        return repr(value)

    words = [text(value) for value in case.args]
    words += [f"{name}={text(value)}" for name, value in case.kwargs.items()]
    lines.append(f"  call: {case.op}({', '.join(words)})")
    if case.precision != "highest":
        lines.append(f"  float32 matmul precision: {case.precision}")
    lines += [f"  note: {note}" for note in case.notes]
    lines += [f"  outside the built space: {reason}" for reason in case.outside]
    return "\n".join(lines)


def _operands(value):
    if isinstance(value, Operand):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _operands(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _operands(item)


def _short(dtype):
    return str(dtype).removeprefix("torch.")


def _step_text(step):
    kind, *rest = step
    if kind == "slice":
        dim, start, stop, every = rest
        return f"[{':, ' * dim}{start}:{stop}:{every}]"
    if kind == "neg":
        return "._neg_view()"
    if kind == "imag":
        return ".conj().imag"
    if kind == "complex":
        return " as complex (torch.view_as_complex)"
    if kind == "conj":
        return ".conj()"
    return f".{kind}{tuple(rest) if kind == 'as_strided' else rest[0]}"
