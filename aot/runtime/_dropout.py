"""dropout: the mask is drawn in the kernel from torch's CUDA generator's seed and
offset, which this function advances as torch's dropout does."""

import torch

from . import _C
from . import _checks as check
from ._library import fake, routed

_launch = _C.launch
_DROPOUT = check.groups("dropout")[()]


@fake("dropout")
def _fake(input, p=0.5, training=True, inplace=False):
    """A new tensor (an op may not return its input, whatever p is), or the input."""
    return input if inplace else torch.empty_like(input)


def dropout(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout: each element zeroed with probability p, survivors
    scaled by 1 / (1 - p). The mask is drawn from torch's CUDA generator, so it is
    fresh per call and repeats under torch.manual_seed. (Captured in a CUDA graph,
    a replay reuses the captured mask.)"""
    nothing = not training or p == 0 or (isinstance(input, torch.Tensor) and input.numel() == 0)
    if isinstance(input, torch.Tensor) and 0 <= p <= 1 and nothing:
        return input  # as torch's dropout: the input itself, traced or not
    return _dropout(input, p, training, inplace)


@routed("dropout")
def _dropout(input, p, training, inplace):
    check.tensor("dropout", "input", input)
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: p must be between 0 and 1, not {p}")
    if not input.is_cuda:
        raise TypeError("dropout: expected a CUDA tensor; move it with .cuda()")
    generator = torch.cuda.default_generators[input.device.index]
    seed, offset = generator.initial_seed(), generator.get_offset()
    generator.set_offset(offset + (input.numel() + 3) // 4 * 4)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return _launch(_DROPOUT, input, seed, offset, p, scale, input if inplace else None)
