"""conv2d (kernels/conv2d.py): an implicit GEMM per group over (N, G, C/G, H, W) views,
padding given as numbers, "valid" or "same" (asymmetric where the window's span is
even: one more on the right, as torch pads it)."""

import torch
from torch._prims_common import suggest_memory_format

from . import _C
from . import _checks as check
from . import _windows as windows
from ._errors import NotBuiltError
from ._library import compiling, traced

F = torch.nn.functional
_launch = _C.launch
_CONV = check.groups("conv2d", "fp32_precision")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d; fp32 through TF32 unless torch's float32 matmul
    precision is "highest" (its default), as upstream ntops's conv2d."""
    op = "conv2d"
    stride = windows.sizes(op, "stride", stride, 2)
    dilation = windows.sizes(op, "dilation", dilation, 2)
    before, after = _padding(op, padding, weight, stride, dilation)
    if not compiling():
        try:
            return _convolve(input, weight, bias, stride, before, after, dilation, groups)
        except _C.SubclassError:
            pass
    if before != after:  # as torch's "same": the input padded on the right first
        input = F.pad(input, (0, after[1] - before[1], 0, after[0] - before[0]))
    arguments = (weight, bias, list(stride), list(before), list(dilation), groups)
    return traced(op)(input, *arguments)


def _padding(op, padding, weight, stride, dilation):
    """(top, left) and (bottom, right) padding."""
    if not isinstance(padding, str):
        pads = windows.sizes(op, "padding", padding, 2)
        if any(pad < 0 for pad in pads):
            raise RuntimeError(f"{op}: negative padding is not supported")
        return pads, pads
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding != "same":
        raise RuntimeError(f"{op}: Invalid padding string: '{padding}'")
    if any(step != 1 for step in stride):
        raise RuntimeError(f"{op}: padding='same' is not supported for strided convolutions")
    spans = [gap * (size - 1) for gap, size in zip(dilation, weight.shape[-2:], strict=True)]
    return tuple(span // 2 for span in spans), tuple(span - span // 2 for span in spans)


def _convolve(input, weight, bias, stride, before, after, dilation, groups):
    op = "conv2d"
    for name, tensor in (("input", input), ("weight", weight), ("bias", bias)):
        if tensor is not None:
            check.tensor(op, name, tensor)
    batched = _checked(op, input, weight, bias, groups)
    if not batched:
        input = input.unsqueeze(0)
    n, _, height, width = input.shape
    kernels, per_group, rows, columns = weight.shape
    counts = []
    for size, kernel, step, gap, low, high in zip(
        (height, width), (rows, columns), stride, dilation, before, after, strict=True
    ):
        if step <= 0 or gap <= 0:
            raise RuntimeError(f"{op}: stride and dilation should be greater than zero")
        padded, span = size + low + high, gap * (kernel - 1) + 1
        if padded < span:
            raise RuntimeError(
                f"{op}: Calculated padded input size per channel: {padded}. Kernel size: "
                f"{span}. Kernel size can't be greater than actual input size"
            )
        counts.append((padded - span) // step + 1)
    layout = _layout(input, weight)
    output = torch.empty(
        (n, kernels, *counts), dtype=input.dtype, device=input.device, memory_format=layout
    )
    shape = (groups, kernels // groups)
    given = bias is not None
    if not given:  # a stand-in the kernel does not read (has_bias 0)
        bias = torch.empty((), dtype=input.dtype, device=input.device).expand(kernels)
    volumes = (
        output.unflatten(1, shape),
        input.unflatten(1, (groups, per_group)),
        weight.unflatten(0, shape),
        bias.unflatten(0, shape),
    )
    _launch(_group(input), *volumes, *stride, *before, *dilation, int(given))
    return output if batched else output.squeeze(0)


def _checked(op, input, weight, bias, groups):
    """Whether `input` has a batch dim, after torch's checks of the shapes and dtypes."""
    if input.ndim not in (3, 4) or weight.ndim != 4:
        raise RuntimeError(
            f"{op}: Expected 3D (unbatched) or 4D (batched) input and a 4D weight, but got "
            f"input of size {list(input.shape)} and weight of size {list(weight.shape)}"
        )
    if not isinstance(groups, int) or groups <= 0:
        raise RuntimeError(f"{op}: non-positive groups is not supported")
    kernels, per_group = weight.shape[:2]
    channels = input.shape[-3]
    if channels != per_group * groups or kernels % groups:
        raise RuntimeError(
            f"{op}: Given groups={groups}, weight of size {list(weight.shape)}, expected "
            f"input{list(input.shape)} to have {per_group * groups} channels, but got "
            f"{channels} channels instead"
        )
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != kernels):
        raise RuntimeError(
            f"{op}: Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional "
            f"with {kernels} elements, but got bias of size {list(bias.shape)} instead"
        )
    for name, tensor in (("weight", weight), ("bias", bias)):
        if tensor is not None and tensor.dtype != input.dtype:
            raise RuntimeError(
                f"{op}: Input type ({input.dtype}) and {name} type ({tensor.dtype}) "
                "should be the same"
            )
    return input.ndim == 4


def _layout(input, weight):
    """torch's (cuDNN's) output layout: channels-last where the input or the weight is."""
    last = torch.channels_last
    if last in (suggest_memory_format(input), suggest_memory_format(weight)):
        return last
    return torch.contiguous_format


def _group(input):
    """The launcher group of `input`'s dtype and fp32 precision: IEEE where torch's
    float32 matmul precision is "highest" (upstream ntops's rule for its conv2d, and
    this wheel's for its products), else TF32."""
    ieee = input.dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest"
    key = ("ieee",) if ieee else ("tf32",)
    if key not in _CONV:
        raise NotBuiltError(
            f"ntops_prebuilt.conv2d: this wheel has no fp32_precision={key[0]} kernels "
            "(torch.get_float32_matmul_precision() picks them); `ntops-aot build --ops "
            "conv2d --dtypes fp32` adds them"
        )
    return _CONV[key]
