"""What the pools share (_max_pool.py, _avg_pool.py; conv2d reads its strides and
dilations with `sizes`): their arguments read as torch reads
them, the output's size, the window's scalars, and the (N, C, D, H, W) views their
kernels take (kernels/_lib/pooling.py: every pool a 3-d pool)."""

import torch
from torch._prims_common import suggest_memory_format

from . import _checks as check

# A window of one element along a dim a pool does not have: kernel size, stride,
# padding and dilation.
_ONE = (1, 1, 0, 1)


def sizes(op, name, value, spatial, default=None):
    """`value` as `spatial` ints: one int, or a sequence of one or `spatial` of them, as
    torch's pools take kernel sizes, strides, paddings and dilations; None or empty
    (a stride) is `default`."""
    if default is not None and (value is None or (not isinstance(value, int) and not value)):
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * spatial
    try:
        found = tuple(value)
    except TypeError:
        found = ()
    if len(found) == 1:
        found *= spatial
    if len(found) != spatial or not all(_is_int(one) for one in found):
        raise RuntimeError(
            f"{op}: {name} must either be a single int, or a tuple of {spatial} ints, not {value!r}"
        )
    return tuple(int(one) for one in found)


def _is_int(value):
    return isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)


def checked(op, input, spatial):
    """`input`, a tensor of `spatial` + 1 or + 2 dims with non-empty non-batch dims."""
    check.tensor(op, "input", input)
    return shaped(op, input, spatial)


def shaped(op, input, spatial):
    """`checked`'s test of the dims alone, which a fake tensor passes too."""
    dims = input.ndim - spatial
    if dims not in (1, 2) or any(size == 0 for size in input.shape[dims - 1 :]):
        raise RuntimeError(
            f"{op}: Expected {spatial + 1}D or {spatial + 2}D (batch mode) tensor with "
            f"optional 0 dim batch size for input, but got {list(input.shape)}"
        )
    return input


def outputs(op, size, kernel, stride, pad, dilation, ceil_mode, halved=True):
    """torch's pooling_output_shape, with its checks: windows that start in the right
    padding are dropped in ceil_mode. `halved`: torch's limit of the padding to half
    the kernel, which the max pools go without (as upstream's compute them: the
    padding is -inf, and a window wholly inside it -inf); the formula holds for any
    padding."""
    if kernel <= 0 or stride <= 0 or dilation <= 0:
        raise RuntimeError(
            f"{op}: kernel size, stride and dilation should be greater than zero, but got "
            f"kernel {kernel}, stride {stride}, dilation {dilation}"
        )
    if pad < 0 or (halved and pad > kernel // 2):
        at_most = " and at most half of kernel size" if halved else ""
        raise RuntimeError(
            f"{op}: pad should be at least zero{at_most}, but got "
            f"pad = {pad} and kernel_size = {kernel}"
        )
    count = (
        size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    ) // stride
    count += 1
    if ceil_mode and (count - 1) * stride >= size + pad:
        count -= 1
    if count < 1:
        raise RuntimeError(
            f"{op}: Given input size {size}, kernel {kernel}, stride {stride}, padding {pad}, "
            f"dilation {dilation}: calculated output size {count}. Output size is too small"
        )
    return count


def fixed(op, input, spatial, kernel, stride, padding, dilation, ceil_mode, halved=True):
    """A fixed window's output sizes and the kernels' 12 window scalars (kernel sizes,
    strides, paddings, dilations along D, H and W); `halved` as `outputs` takes it."""
    dims = list(zip(kernel, stride, padding, dilation, strict=True))
    shape = input.shape[input.ndim - spatial :]
    counts = [
        outputs(op, size, *dim, ceil_mode, halved) for size, dim in zip(shape, dims, strict=True)
    ]
    return counts, _scalars([_ONE] * (3 - spatial) + dims)


def requested(op, input, spatial, output_size):
    """An adaptive pool's output_size as `spatial` ints: one int (or a list of one, as
    the op's schema passes an int) for every dim, None for the input's size there, as
    torch's functional reads it."""
    if isinstance(output_size, int):
        output_size = (output_size,) * spatial
    try:
        counts = list(output_size)
    except TypeError:
        counts = []
    if len(counts) == 1:
        counts *= spatial
    if len(counts) != spatial:
        raise RuntimeError(f"{op}: output_size must be {spatial} ints, not {output_size!r}")
    if None in counts:  # (a tensor subclass too: the op then gets the sizes)
        if not isinstance(input, torch.Tensor) or input.ndim < spatial:
            raise RuntimeError(f"{op}: output_size None takes the size of an input's dim")
        shape = input.shape[input.ndim - spatial :]
        counts = [
            size if count is None else count for count, size in zip(counts, shape, strict=True)
        ]
    if not all(_is_int(count) for count in counts):
        raise RuntimeError(f"{op}: output_size must be {spatial} ints, not {output_size!r}")
    if any(count < 0 for count in counts):
        raise RuntimeError(f"{op}: elements of output_size must be greater than or equal to 0")
    return counts


def adaptive(input, spatial, counts):
    """A fixed window that covers every adaptive window of `counts` outputs (their
    kernel's scalars): output o of n along a dim of L reads [floor(o L / n),
    ceil((o + 1) L / n)), and the kernels keep each output's own elements of it. For
    L >= n the windows start at o * (L // n), the last at most L - (n - 1) * (L // n)
    long (as upstream's fixed windows, which are exact only where n divides L); for
    L < n a window holds one element or two, and a stride of 1 from -pad covers them."""
    shape = input.shape[input.ndim - spatial :]
    dims = []
    for size, count in zip(shape, counts, strict=True):
        if count == 0:
            dims.append(_ONE)
        elif size >= count:
            step = size // count
            dims.append((size - (count - 1) * step, step, 0, 1))
        else:
            pad = count - 1 - (count - 1) * size // count
            dims.append((pad + 1, 1, pad, 1))
    return _scalars([_ONE] * (3 - spatial) + dims)


def _scalars(dims):
    """(kernel, stride, pad, dilation) per D, H, W -> the kernels' order (pooling.WINDOW)."""
    return tuple(value for part in zip(*dims, strict=True) for value in part)


def empty(input, spatial, counts, dtype=None, formats=True):
    """An output of `counts` laid out as torch lays its pools' out: in the input's
    memory format (channels-last ones included; contiguous without `formats`), a 1-d
    pool's as a 2-d pool's of input.unsqueeze(-2) (torch computes it so)."""
    shape = (*input.shape[: input.ndim - spatial], *counts)
    like = input.unsqueeze(-2) if spatial == 1 else input
    # torch's, as its pools' outputs follow
    format_ = suggest_memory_format(like) if formats else torch.contiguous_format
    if spatial == 1:
        wide = (*shape[:-1], 1, shape[-1])
        out = torch.empty(
            wide, dtype=dtype or input.dtype, device=input.device, memory_format=format_
        )
        return out.squeeze(-2)
    return torch.empty(
        shape, dtype=dtype or input.dtype, device=input.device, memory_format=format_
    )


def volume(tensor, spatial):
    """`tensor` (batch optional) as the kernels' (N, C, D, H, W) view."""
    if tensor.ndim == spatial + 1:
        tensor = tensor.unsqueeze(0)
    for _ in range(3 - spatial):
        tensor = tensor.unsqueeze(2)
    return tensor
