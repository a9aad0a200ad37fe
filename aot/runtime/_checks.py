"""Checks the runtime functions share, and the scalar rules of torch's type promotion
they follow or refuse."""

import torch

from . import _C, _ops

NUMBERS = (bool, int, float)


def groups(op, *switches):
    """The launcher groups of `op` by the values of `switches` (a tuple of them, in
    that order), as the build named them (_ops.GROUPS)."""
    return {
        tuple(values[switch] for switch in switches): _C.group(key)
        for key, values in _ops.GROUPS[op].items()
    }


def kind(value):
    """The switch value a Tensor|Number argument picks (see `is_scalar`)."""
    return _ops.NUMBER if is_scalar(value) else _ops.TENSOR


def tensor(op, name, value):
    """`value`, a torch.Tensor; refusing a subclass that overrides __torch_dispatch__
    here, before a torch op (a dtype conversion, a copy) turns it into a plain tensor
    whose values the subclass never vouched for: the launcher refuses it too."""
    if type(value) is not torch.Tensor:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, not {type(value).__name__}")
        if _C.overrides_dispatch(type(value)):
            raise _C.SubclassError(
                f"{op}: {name} is a {type(value).__name__}, a tensor subclass that overrides "
                "__torch_dispatch__ (a FakeTensor while torch.compile or torch.export traces, "
                "a functional or a wrapper tensor): its memory is not its data, and prebuilt "
                "kernels read memory; the public functions send such calls to their "
                "torch.library op"
            )
    return value


def dim(op, value, ndim):
    if not isinstance(value, int):
        raise TypeError(f"{op}: dim must be an int, not {type(value).__name__}")
    if not -ndim <= value < ndim:
        raise IndexError(
            f"{op}: dim {value} is out of range for a {ndim}-D tensor "
            f"(expected to be in range of [{-ndim}, {ndim - 1}])"
        )
    return value % ndim


def is_scalar(value):
    """Whether `value` takes the scalar path: anything but a tensor (`scalar` then
    refuses what is not a number), or a CPU 0-dim tensor (torch lets those meet
    CUDA tensors)."""
    if not isinstance(value, torch.Tensor):
        return True
    return value.ndim == 0 and value.device.type == "cpu"


def scalar_operand(op, name, input, value):
    """(input, value as a number) for a scalar-path call (`is_scalar(value)`). A 0-dim
    input meeting a CPU 0-dim tensor is first promoted with it, as torch promotes two
    tensors (0-dim fp16 and 0-dim fp32 give fp32), where a Python number would leave
    input's dtype."""
    if (
        isinstance(value, torch.Tensor)
        and isinstance(input, torch.Tensor)
        and input.ndim == 0
        and value.ndim == 0
    ):
        dtype = torch.result_type(input, value)
        if dtype != input.dtype:
            input = input.to(dtype)
    return input, scalar(op, name, value, input)


def scalar(op, name, value, input):
    """`value` as a Python number to combine with `input`, where torch's promotion
    leaves the result in input's dtype; what it would promote is refused."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if not isinstance(value, NUMBERS):
        raise TypeError(
            f"{op}: {name} must be a tensor or a Python number, not {type(value).__name__}"
        )
    dtype = input.dtype if isinstance(input, torch.Tensor) else None
    if dtype is None or dtype.is_floating_point:
        return value
    if dtype == torch.bool and type(value) is not bool:
        raise TypeError(
            f"{op}: a bool tensor with {value!r} would promote to {type(value).__name__}: "
            "convert the tensor first (e.g. .int())"
        )
    if isinstance(value, float):
        raise TypeError(
            f"{op}: a {dtype} tensor with the float {value!r} would promote to float: "
            "convert the tensor first (e.g. .float())"
        )
    return value


def normalized(op, input, normalized_shape):
    """The trailing `normalized_shape` of `input` as a tuple; checks it is one."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    count = len(shape)
    if count == 0 or count > input.ndim or tuple(input.shape[input.ndim - count :]) != shape:
        raise ValueError(
            f"{op}: normalized_shape {list(shape)} must be the trailing dims of "
            f"input of shape {list(input.shape)}"
        )
    return shape


def vector(op, name, value, shape):
    """An optional weight or bias of `shape`, flattened to the one dim kernels take."""
    if value is None:
        return None
    tensor(op, name, value)
    if tuple(value.shape) != shape:
        raise ValueError(
            f"{op}: {name} has shape {list(value.shape)}, normalized_shape is {list(shape)}"
        )
    return value if len(shape) == 1 else value.reshape(-1)
