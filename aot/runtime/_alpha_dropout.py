"""alpha_dropout: the mask is drawn in the kernel from torch's CUDA generator's seed and
offset, which this function advances as dropout's does (aot/runtime/_dropout.py); the
affine map of kept and dropped elements is torch's."""

import math

import torch

from . import _C
from . import _checks as check
from ._library import fake, routed

_launch = _C.launch
_ALPHA_DROPOUT = check.groups("alpha_dropout")[()]
# SELU's negative saturation is -_ALPHA (its alpha times its scale), torch's constant.
_ALPHA = 1.7580993408473766


@fake("alpha_dropout")
def _fake(input, p=0.5, training=False, inplace=False):
    """A new tensor (an op may not return its input, whatever p is), or the input."""
    return input if inplace else torch.empty_like(input)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """torch.nn.functional.alpha_dropout: each element kept with probability 1 - p as
    a * input + b, else set to a * -alpha + b (SELU's saturation, moved alike), with a
    and b that keep zero-mean unit-variance inputs so. Not training (the default, as
    torch's), or p = 0: the input itself. The mask is drawn from torch's CUDA generator,
    so it is fresh per call and repeats under torch.manual_seed. (Captured in a CUDA
    graph, a replay reuses the captured mask.)"""
    nothing = not training or p == 0 or (isinstance(input, torch.Tensor) and input.numel() == 0)
    if isinstance(input, torch.Tensor) and 0 <= p <= 1 and nothing:
        return input  # as torch's: the input itself, traced or not
    return _alpha_dropout(input, p, training, inplace)


@routed("alpha_dropout")
def _alpha_dropout(input, p, training, inplace):
    check.tensor("alpha_dropout", "input", input)
    if not 0 <= p <= 1:
        raise ValueError(f"alpha_dropout: dropout probability has to be between 0 and 1, not {p}")
    if not input.is_cuda:
        raise TypeError("alpha_dropout: expected a CUDA tensor; move it with .cuda()")
    generator = torch.cuda.default_generators[input.device.index]
    seed, offset = generator.initial_seed(), generator.get_offset()
    generator.set_offset(offset + (input.numel() + 3) // 4 * 4)
    return _launch(_ALPHA_DROPOUT, input, seed, offset, *affine(p), input if inplace else None)


def affine(p):
    """The kernel's (p, a, b, saturated): kept elements a * x + b, dropped ones
    `saturated`, as torch computes them. At p = 1 torch returns input * 0 (NaN stays
    NaN, -1 gives -0.0): every element kept, with a = 0 and b = -0.0."""
    if p == 1:
        return 0.0, 0.0, -0.0, 0.0
    a = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
    return p, a, _ALPHA * a * p, _ALPHA * a * (p - 1)
