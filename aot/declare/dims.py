"""The named dims of a group (SPACE.dims), as the launcher checks them in every call.

SPACE.dims spells each dim of a tensor as None (unnamed), a name ("rows": dims of one
name have one size in a call), a name with the size the variant was compiled for
("head_dim={head_dim}", formatted with the variant's switches: a call of another size
is refused), or, on an output, a product and quotient of names ("heads_q/heads_kv*seq_q",
evaluated left to right; a quotient that is not whole is refused). `named_dims` checks
a group's spellings as the launcher needs them; the registry runs it when a kernel
file is loaded, the package stage to render the tables.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from ..errors import UnsupportedKernel
from .arguments import Arg
from .limits import NT_MAX_FACTORS, NT_MAX_NAMES

_DERIVED = re.compile(r"[*/]")


@dataclasses.dataclass(frozen=True)
class Dim:
    """A named dim of a group, as the launcher checks it."""

    name: str  # for messages
    spelled: str  # as SPACE.dims spells it, switches formatted in
    size: int = 0  # the compiled-in size; 0: none
    factors: tuple[int, ...] = ()  # derived: k + 1 multiplies by name k, -(k + 1) divides


def named_dims(
    group: str, coalesce: str, args: Sequence[Arg], switches: Mapping[str, str]
) -> list[Dim]:
    """Group `group`'s named dims, in order of first use, derived ones last; checked as
    the launcher needs them: a name per dim on tensors it does not coalesce, trailing
    names only on those it coalesces (coalesce="leading" keeps the last dims), dims of
    an input that broadcasts named by the tensors it broadcasts against, and derived
    dims on outputs, of names the inputs bind."""
    plain: dict[str, Dim] = {}
    derived: list[str] = []
    bound: set[str] = set()
    for arg in (arg for arg in args if arg.dims):
        for spelled in _checked(group, coalesce, arg, switches):
            if _DERIVED.search(spelled):
                derived.append(spelled)
                continue
            dim = _plain(group, spelled, plain)
            plain.setdefault(spelled, dim)
            if not arg.broadcast or dim.size:
                bound.add(spelled)
    unbound = set(plain) - bound
    if unbound:
        raise UnsupportedKernel(
            f"{group}: dims {sorted(unbound)} are named only by inputs that broadcast "
            "(SPACE.broadcast); name them on a tensor those inputs broadcast against"
        )
    names = list(plain.values())
    names += [_derived(group, spelled, names) for spelled in dict.fromkeys(derived)]
    if len(names) > NT_MAX_NAMES:
        raise UnsupportedKernel(
            f"{group}: {len(names)} named dims; the launcher takes at most {NT_MAX_NAMES}"
        )
    return names


def _plain(group: str, spelled: str, known: Mapping[str, Dim]) -> Dim:
    name, _, size = spelled.partition("=")
    dim = Dim(name, spelled, int(size) if size else 0)
    if size and dim.size <= 0:
        raise UnsupportedKernel(f"{group}: {spelled!r} is not a positive size")
    other = next((d for d in known.values() if d.name == name), None)
    if other is not None and other.spelled != spelled:
        raise UnsupportedKernel(f"{group}: dim {name} is spelled {other.spelled!r} and {spelled!r}")
    return dim


def _checked(group: str, coalesce: str, arg: Arg, switches: Mapping[str, str]) -> list[str]:
    """`arg`'s spelled dims, less the unnamed ones, where the launcher can check them."""
    coalesced = not (arg.fixed or coalesce == "none")
    if coalesced and coalesce != "leading":
        raise UnsupportedKernel(
            f"{group}: SPACE.dims names the dims of {arg.name}, which the launcher "
            "coalesces; only tensors it does not (coalesce='none', SPACE.fixed) have them, "
            "and trailing dims where it coalesces the leading ones"
        )
    if len(arg.dims) > arg.ndim or (not coalesced and len(arg.dims) != arg.ndim):
        raise UnsupportedKernel(
            f"{group}: SPACE.dims gives {arg.name} {len(arg.dims)} names for its {arg.ndim} dims"
        )
    try:
        spelled = arg.spelled(switches)
    except (KeyError, IndexError, ValueError) as error:
        raise UnsupportedKernel(
            f"{group}: SPACE.dims of {arg.name} {arg.dims} names no switch value ({error!r})"
        ) from error
    if coalesced and None in spelled:
        raise UnsupportedKernel(f"{group}: {arg.name} names its trailing dims: each has a name")
    derived = [dim for dim in spelled if dim is not None and _DERIVED.search(dim)]
    if derived and (not arg.output or coalesced):
        raise UnsupportedKernel(
            f"{group}: {arg.name}'s dim {derived[0]!r} is derived: only outputs "
            "the launcher does not coalesce have derived dims"
        )
    return [dim for dim in spelled if dim is not None]


def _derived(group: str, spelled: str, names: Sequence[Dim]) -> Dim:
    """A derived dim: its names, each bound by an input, multiplied or divided."""
    tokens = [token.strip() for token in re.split(r"([*/])", spelled)]
    operands, operators = tokens[::2], ["*", *tokens[1::2]]
    index = {dim.name: n for n, dim in enumerate(names)}
    missing = [name for name in operands if name not in index]
    if missing or len(operands) > NT_MAX_FACTORS:
        raise UnsupportedKernel(
            f"{group}: derived dim {spelled!r} takes at most {NT_MAX_FACTORS} names, "
            f"each bound by an input (not {missing})"
        )
    factors = tuple(
        (index[name] + 1) * (1 if operator == "*" else -1)
        for name, operator in zip(operands, operators, strict=True)
    )
    return Dim(spelled, spelled, 0, factors)
