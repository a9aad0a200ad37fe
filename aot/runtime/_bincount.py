"""bincount (kernels/bincount.py): counts, or sums of weights, by value, into an output
of max(max(input) + 1, minlength) bins.

That length is the values' to say, so torch reads the input's minimum and maximum
back from the GPU (two synchronisations). Here one launch counts into `minlength`
bins (at least one) and leaves the least and largest values beside them, and one
read (16 bytes) brings both back: where `minlength` covers every value, as in a
mixture of experts' tokens per expert (`bincount(ids, minlength=num_experts)`), that
is the whole call; where a value lies past it, a second launch counts into an output
of the length the maximum asks. The read is not avoidable: an output shorter than
torch's would be a wrong answer, and a negative value must be refused.
"""

import torch

from . import _C
from . import _checks as check
from ._library import fake, routed

_launch = _C.launch
_BINCOUNT = check.groups("bincount", "weights")
# Inputs the kernels take as they are; others are converted to int32 (their values fit).
_KERNEL_INPUTS = (torch.int32, torch.int64)
_NARROW = (torch.int8, torch.int16, torch.uint8)


@routed("bincount")
def bincount(input, weights=None, minlength=0):
    """torch.bincount: how often each value of a 1-D tensor of non-negative integers
    occurs (int64), or the sum of its `weights` (float32 for float32 weights, float64
    for any others, as torch gives), over max(max(input) + 1, minlength) bins."""
    check.tensor("bincount", "input", input)
    if weights is not None:
        check.tensor("bincount", "weights", weights)
    if _nothing(input, weights, minlength):  # torch's: int64 zeros, weights or not
        return torch.zeros(minlength, dtype=torch.int64, device=input.device)
    if input.dtype in _NARROW:
        input = input.to(torch.int32)
    return _counted(input, _weighed(weights), minlength)


@fake("bincount")
def _bincount_fake(input, weights=None, minlength=0):
    """torch's checks; the length is the values' to say (a size a graph learns when the
    op has run: torch's own bincount has none to give)."""
    if _nothing(input, weights, minlength):
        return input.new_zeros(minlength, dtype=torch.int64)
    length = torch.library.get_ctx().new_dynamic_size(min=max(minlength, 1))
    dtype = torch.int64 if weights is None else _summed(weights.dtype)
    return input.new_empty(length, dtype=dtype)


def _nothing(input, weights, minlength):
    """Whether the input is empty, after torch's checks of what is not its values."""
    if input.dtype not in (*_KERNEL_INPUTS, *_NARROW):
        raise NotImplementedError(f"\"bincount_cuda\" not implemented for '{_name(input.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if input.ndim == 1 and input.numel() == 0:
        return True
    if input.ndim != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    return False


def _name(dtype):
    """torch's name of a dtype in its messages: Float, Half, BFloat16, Bool."""
    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


def _summed(dtype):
    """The dtype weights of `dtype` are summed in, and the result's: torch's float32 for
    float32, float64 for any other."""
    return torch.float32 if dtype == torch.float32 else torch.float64


def _weighed(weights):
    """The weights as a kernel takes them (`_summed`: others converted, as torch
    converts them); None for counts."""
    return None if weights is None else weights.to(_summed(weights.dtype))


def _counted(input, weights, minlength):
    """Counts into `minlength` bins (at least one), then, where the largest value
    lies past them, into as many as it asks."""
    if weights is None:
        group, dtype, extra = _BINCOUNT[("none",)], torch.int64, ()
    else:
        kind = "fp32" if weights.dtype == torch.float32 else "fp64"
        group, dtype, extra = _BINCOUNT[(kind,)], weights.dtype, (weights,)
    device = input.device
    extrema = torch.zeros(2, dtype=torch.int64, device=device)  # min(0, ...), max(0, ...)
    size = max(minlength, 1)
    output = torch.zeros(size, dtype=dtype, device=device)
    _launch(group, input, *extra, extrema, output)
    least, largest = extrema.tolist()  # the one read back
    if least < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    length = max(largest + 1, minlength)
    if length > size:  # the values past the first output, counted again in full
        output = torch.zeros(length, dtype=dtype, device=device)
        _launch(group, input, *extra, extrema, output)
    return output
