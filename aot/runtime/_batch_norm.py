"""batch_norm and instance_norm (kernels/batch_norm.py, one kernel): the input (N, C,
*spatial) viewed as (groups, channels, outer, inner), a program per (group, channel).

Their ops return the output and the running statistics to copy into the running
tensors (empty where none are updated): a torch.library op writes no argument it does
not declare written, and `Tensor?` arguments cannot be, so a traced call copies them
after the op, where a graph can order the copies; an eager call writes them directly.
An empty input leaves them as they were (torch's instance_norm makes them NaN over an
empty batch).
"""

import math
from typing import NamedTuple

import torch

from . import _C
from . import _checks as check
from ._library import compiling, fake, implementation, traced

_launch = _C.launch
_NORM = check.groups("batch_norm", "params")
_HALVES = (torch.float16, torch.bfloat16)
_PARAMETERS = ("weight", "bias", "running_mean", "running_var")


class _Plan(NamedTuple):
    """What a call does: the kernels' `params` switch value, the input's N, C and
    spatial size, whether it normalizes by the input's statistics, and whether it
    updates running ones."""

    params: str
    n: int
    c: int
    spatial: int
    batch_stats: bool
    updates: bool


def _plan(op, input, running_mean, running_var, weight, bias, batch_stats):
    """The call's `_Plan`, after torch's checks (of metadata only: the fakes run it)."""
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None")
    if input.ndim < 2:
        raise ValueError(f"{op}: input must have at least 2 dims (N, C, ...), not {input.ndim}")
    n, c = input.shape[:2]
    spatial = math.prod(input.shape[2:])
    given = (weight, bias, running_mean, running_var)
    params = _parameters(op, input, c, dict(zip(_PARAMETERS, given, strict=True)))
    if op == "batch_norm":
        # Without running statistics, the batch's (ntops.torch.batch_norm's default).
        batch_stats = batch_stats or running_mean is None
        if batch_stats and n * spatial == 1:
            size = input.shape
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {size}"
            )
    elif batch_stats and spatial == 1:
        size = input.shape
        raise ValueError(
            f"Expected more than 1 spatial element when training, got input size {size}"
        )
    elif not batch_stats and running_mean is None:
        raise RuntimeError(
            "Expected running_mean and running_var to be defined when use_input_stats is false"
        )
    updates = batch_stats and running_mean is not None and input.numel() > 0
    return _Plan(params, n, c, spatial, batch_stats, updates)


def _parameters(op, input, channels, tensors):
    """The kernels' `params` switch value for the weight, bias and running statistics
    (`tensors`, by name; None where absent): their dtype is the input's, or float32
    beside a half-type input; each has one element per channel."""
    given = {name: tensor for name, tensor in tensors.items() if tensor is not None}
    for name, tensor in given.items():
        if tensor.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {tensor.numel()}")
    dtypes = {tensor.dtype for tensor in given.values()}
    if not dtypes or dtypes == {input.dtype}:
        return "same"
    if dtypes == {torch.float32} and input.dtype in _HALVES:
        return "fp32"
    raise TypeError(
        f"{op}: the weight, bias and running statistics must all be {input.dtype} or, beside "
        f"a half-type input, all float32; got {sorted(str(dtype) for dtype in dtypes)}"
    )


def _output(op, input):
    """The output, in torch's layout: batch_norm's like its input's (torch's meta
    kernel's; its CUDA kernel makes permutations other than channels-last contiguous),
    instance_norm's contiguous."""
    if op == "batch_norm":
        return torch.empty_like(input)
    return torch.empty(input.shape, dtype=input.dtype, device=input.device)


def _grouped(op, tensor, plan):
    """`tensor` (N, C, *spatial) as the kernel's 4 dims (see the module's doc), a view;
    None where its spatial dims do not merge into one without a copy."""
    try:
        flat = tensor.view(plan.n, plan.c, plan.spatial)
    except RuntimeError:
        return None
    if op == "instance_norm":
        return flat.unsqueeze(2)
    if plan.spatial == 1:  # the batch as the rows: a tile of N, not N tiles of one
        return flat.permute(1, 2, 0).unsqueeze(0)
    return flat.permute(1, 0, 2).unsqueeze(0)


def _ungrouped(op, grouped, shape, plan):
    """The kernel's 4 dims (`_grouped`) back as a tensor of `shape`."""
    if op == "instance_norm":
        return grouped.squeeze(2).reshape(shape)
    if plan.spatial == 1:
        return grouped.squeeze(0).permute(2, 0, 1).reshape(shape)
    return grouped.squeeze(0).permute(1, 0, 2).reshape(shape)


def _normalized(op, input, running_mean, running_var, weight, bias, batch_stats, momentum, eps):
    """(output, new running mean, new running variance): the latter (groups, channels)
    in the parameters' dtype, to be copied (batch_norm) or averaged over the batch
    (instance_norm) into the running statistics; None where none are updated."""
    given = (weight, bias, running_mean, running_var)
    for name, tensor in zip(_PARAMETERS, given, strict=True):
        if tensor is not None:
            check.tensor(op, name, tensor)
    check.tensor(op, "input", input)
    plan = _plan(op, input, running_mean, running_var, weight, bias, batch_stats)
    device, output = input.device, _output(op, input)
    groups = plan.n if op == "instance_norm" else 1
    kind = input.dtype if plan.params == "same" else torch.float32
    new_mean, new_var = (torch.empty(groups, plan.c, dtype=kind, device=device) for _ in range(2))
    stand_in = torch.empty((), dtype=kind, device=device).expand(groups, plan.c)
    values = [
        stand_in if one is None else one.reshape(1, plan.c).expand(groups, plan.c) for one in given
    ]
    source = _grouped(op, input, plan)
    if source is None:  # spatial dims that do not merge: a contiguous copy
        source = _grouped(op, input.contiguous(), plan)
    target = _grouped(op, output, plan)
    result = target if target is not None else torch.empty_like(source)
    flags = (int(plan.batch_stats), int(weight is not None), int(bias is not None))
    group = _NORM[(plan.params,)]
    _launch(group, source, result, *values, new_mean, new_var, eps, momentum, *flags)
    if target is None:  # an output laid out as such an input: written through a copy
        output.copy_(_ungrouped(op, result, input.shape, plan))
    if not plan.updates:
        return output, None, None
    return output, new_mean, new_var


def _op(op, *given):
    """The op's results: the output, and the running statistics updated (instance_norm's
    averaged over the batch, as torch's), empty where none are."""
    output, new_mean, new_var = _normalized(op, *given)
    if new_mean is None:
        nothing = output.new_empty(0)
        return output, nothing, nothing.clone()
    if op == "instance_norm":
        return output, new_mean.mean(0), new_var.mean(0)
    return output, new_mean[0].clone(), new_var[0].clone()


def _faked(op, input, running_mean, running_var, weight, bias, batch_stats, momentum, eps):
    """The op's results' metadata, after its checks (`_plan`)."""
    plan = _plan(op, input, running_mean, running_var, weight, bias, batch_stats)
    output = _output(op, input)
    if not plan.updates:
        nothing = output.new_empty(0)
        return output, nothing, nothing.clone()
    return output, running_mean.new_empty(plan.c), running_var.new_empty(plan.c)


@implementation("batch_norm")
def _batch_norm_op(
    input, running_mean=None, running_var=None, weight=None, bias=None, training=False,
    momentum=0.1, eps=1e-5,
):  # fmt: skip
    return _op(
        "batch_norm", input, running_mean, running_var, weight, bias, training, momentum, eps
    )


@implementation("instance_norm")
def _instance_norm_op(
    input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
    momentum=0.1, eps=1e-5,
):  # fmt: skip
    given = (input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
    return _op("instance_norm", *given)


@fake("batch_norm")
def _batch_norm_fake(
    input, running_mean=None, running_var=None, weight=None, bias=None, training=False,
    momentum=0.1, eps=1e-5,
):  # fmt: skip
    given = (input, running_mean, running_var, weight, bias, training, momentum, eps)
    return _faked("batch_norm", *given)


@fake("instance_norm")
def _instance_norm_fake(
    input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
    momentum=0.1, eps=1e-5,
):  # fmt: skip
    given = (input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
    return _faked("instance_norm", *given)


def batch_norm(
    input, running_mean=None, running_var=None, weight=None, bias=None, training=False,
    momentum=0.1, eps=1e-5,
):  # fmt: skip
    """torch.nn.functional.batch_norm over the channels (dim 1) of (N, C, *spatial): the
    batch's statistics in training (the running ones updated with them, the variance
    unbiased), the running ones otherwise. Without running statistics the batch's are
    used whether training or not: ntops.torch.batch_norm(input, weight, bias, eps,
    training=True) has none, and its calls by name work here (torch refuses them in
    evaluation). Weight, bias and running statistics in the input's dtype, or float32
    beside a half-type input."""
    given = (input, running_mean, running_var, weight, bias, training, momentum, eps)
    return _public("batch_norm", *given)


def instance_norm(
    input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
    momentum=0.1, eps=1e-5,
):  # fmt: skip
    """torch.nn.functional.instance_norm over each instance's channels of (N, C,
    *spatial): their own statistics (use_input_stats; the running ones, given, updated
    with their mean over the batch), or the running ones."""
    given = (input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
    return _public("instance_norm", *given)


def _public(op, input, running_mean, running_var, weight, bias, *rest):
    """An eager call writes the running statistics itself (instance_norm's mean over
    the batch straight into them); a traced one (Dynamo, or a tensor subclass) copies
    the op's into them."""
    given = (input, running_mean, running_var, weight, bias, *rest)
    if compiling():
        return _traced(op, *given)
    try:
        output, new_mean, new_var = _normalized(op, *given)
    except _C.SubclassError:
        return _traced(op, *given)
    for running, new in ((running_mean, new_mean), (running_var, new_var)):
        if new is None:
            continue
        if op == "instance_norm":
            torch.mean(new, 0, out=running.view(-1))
        else:
            running.view(-1).copy_(new[0])
    return output


def _traced(op, input, running_mean, running_var, *rest):
    output, new_mean, new_var = traced(op)(input, running_mean, running_var, *rest)
    if new_mean.numel():
        running_mean.view(-1).copy_(new_mean)
        running_var.view(-1).copy_(new_var)
    return output
