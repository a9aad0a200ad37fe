"""dropout: the mask is drawn in the kernel from torch's CUDA generator's seed and
offset, which this function advances as torch's dropout does."""

import torch

from ntops_prebuilt import _C
from ntops_prebuilt import _checks as check
from ntops_prebuilt._library import routed

_launch = _C.launch
_DROPOUT = check.groups("dropout")[()]


@routed("dropout")
def dropout(input, p=0.5, training=True, inplace=False):
    """torch.nn.functional.dropout: each element zeroed with probability p, survivors
    scaled by 1 / (1 - p). The mask is drawn from torch's CUDA generator, so it is
    fresh per call and repeats under torch.manual_seed. (Captured in a CUDA graph,
    a replay reuses the captured mask.)"""
    check.tensor("dropout", "input", input)
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: p must be between 0 and 1, not {p}")
    if not training or p == 0 or input.numel() == 0:
        return input
    if not input.is_cuda:
        raise TypeError("dropout: expected a CUDA tensor; move it with .cuda()")
    generator = torch.cuda.default_generators[input.device.index]
    seed, offset = generator.initial_seed(), generator.get_offset()
    generator.set_offset(offset + (input.numel() + 3) // 4 * 4)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return _launch(_DROPOUT, input, seed, offset, p, scale, input if inplace else None)
