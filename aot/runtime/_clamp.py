"""clamp: torch's overloads (number bounds, tensor bounds), each bound picking its
kernel's switch; the launcher broadcasts the tensor bounds with the input."""

import math

import torch

from . import _C, _ops
from . import _checks as check
from ._library import routed

_launch = _C.launch
_CLAMP = check.groups("clamp", "min", "max")
_TENSOR, _NUMBER = _ops.TENSOR, _ops.NUMBER


def _bounds(min, max):
    """clamp's (min, max) as torch's overloads take them: a number beside a tensor is
    the number overload, which reads a 0-dim tensor as its value (on any device) and
    takes no larger tensor."""
    given = [bound for bound in (min, max) if bound is not None]
    tensors = [bound for bound in given if isinstance(bound, torch.Tensor)]
    if not tensors or len(tensors) == len(given):
        return min, max
    if any(bound.ndim for bound in tensors):
        raise TypeError(
            "clamp: min and max must both be numbers (0-dim tensors count) or both be "
            f"tensors, as torch.clamp takes them, not {type(min).__name__} and "
            f"{type(max).__name__}"
        )
    return tuple(b.item() if isinstance(b, torch.Tensor) else b for b in (min, max))


def clamp(input, min=None, max=None, *, out=None):
    """torch.clamp: bounds both numbers or both tensors (broadcast with input), either
    may be None. NaN as torch on CUDA: a NaN element of input or of a tensor bound
    makes that element NaN, as do number bounds both given with one NaN; a lone NaN
    number is ignored."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    # torch's overload rule first, traced or not: the op's overloads take numbers or
    # tensors, both.
    min, max = _bounds(min, max)
    return _clamp(input, min, max, out=out)


@routed("clamp")
def _clamp(input, min, max, *, out=None):
    lone = max if min is None else min if max is None else None
    if isinstance(lone, float) and math.isnan(lone):
        return _launch(_CLAMP[_NUMBER, _NUMBER], input, -math.inf, math.inf, out)
    kinds, bounds = [], []
    for name, bound, missing in (("min", min, -math.inf), ("max", max, math.inf)):
        if bound is None:
            kinds.append(_NUMBER)
            bounds.append(missing)
        elif isinstance(bound, torch.Tensor):
            # A CPU 0-dim tensor too: torch's clamp takes no CPU scalars beside CUDA
            # tensors (its tensor overload is not a binary op), and the launcher
            # refuses one as it refuses any CPU tensor.
            kinds.append(_TENSOR)
            bounds.append(bound)
        else:
            kinds.append(_NUMBER)
            bounds.append(check.scalar("clamp", name, bound, input))
    return _launch(_CLAMP[tuple(kinds)], input, *bounds, out)
