"""batch_norm and instance_norm, one kernel: normalize groups of elements by their own
mean and variance (training; instance_norm's use_input_stats) or by running ones, then
scale and shift by a weight and a bias of the group's channel.

The runtime (aot/runtime/_batch_norm.py) views the input (N, C, *spatial) as 4 dims
(groups, channels, outer, inner), one program per (group, channel): batch_norm's as
(1, C, N, spatial) (a channel's elements, over the batch), instance_norm's as
(N, C, 1, spatial) (an instance's channel); the weight, bias and running statistics
are given per (group, channel), expanded over instance_norm's batch. Where a row of
spatial elements is a single one, batch_norm takes the batch as its rows.

Mean and (biased) variance in fp32 from two passes (the second corrects the first's
mean, as layer_norm's: kernels/layer_norm.py), a third writes the result, as torch's
CUDA kernel computes it: weight * (x - mean) * rsqrt(var + eps) + bias. Each program
also writes the running statistics updated with its own, momentum * mean + (1 -
momentum) * running (the variance unbiased), in their dtype, which the runtime copies
into the running tensors (instance_norm's: their mean over the batch, as torch's).

Weight and bias are flags (`has_weight`, `has_bias`): without them the runtime passes
stand-ins the kernel reads and leaves, so that one kernel serves every call. The
parameters' dtype is the input's, or float32 for half-type inputs (switch `params`),
the mixed precision torch's CUDA batch_norm takes.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

_GROUPS = ("groups", "channels")
SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(4,),
    switches={"params": ("same", "fp32")},
    switch_dtypes={"params": ("fp16", "bf16")},
    coalesce="none",
    outputs=("output", "new_mean", "new_var"),
    # One value a program each.
    unspecialized=("weight", "bias", "running_mean", "running_var", "new_mean", "new_var"),
    # Aligned rows of a multiple of 16 elements get 16-byte loads; any other layout the
    # generic kernel, whose loads of consecutive elements coalesce as well (a unit-stride
    # kernel would buy no wider loads). Without unit-stride kernels (these 5, median's
    # and quantile's 4) the five functions' sm_80 build took 28.6 CPU-s, not 36.5.
    specs=("aligned", "generic", "wide"),
    dims={
        "input": (*_GROUPS, "outer", "inner"),
        "weight": _GROUPS,
        "bias": _GROUPS,
        "running_mean": _GROUPS,
        "running_var": _GROUPS,
        "output": (*_GROUPS, "outer", "inner"),
        "new_mean": _GROUPS,
        "new_var": _GROUPS,
    },
)

_RETURNS = "(Tensor, Tensor, Tensor)"  # the output, and the running statistics to copy
API = (
    Api(
        "(Tensor input, Tensor? running_mean=None, Tensor? running_var=None,"
        " Tensor? weight=None, Tensor? bias=None, bool training=False, float momentum=0.1,"
        " float eps=1e-05)",
        "torch.nn.functional.batch_norm",
        wrapper="_batch_norm",
        returns=_RETURNS,
        # running_mean and running_var spelled out where None: torch's function takes
        # them by position, without defaults.
        samples=(
            sample(
                input=(6, 42, 123),
                running_mean=None,
                running_var=None,
                weight=(42,),
                bias=(42,),
                training=True,
            ),
            sample(input=(8, 3, 5, 7), running_mean=(3,), running_var=(3,), training=True),
            sample(
                input=(6, 42, 123),
                running_mean=(42,),
                running_var=(42,),
                weight=(42,),
                bias=(42,),
                domain="positive",
            ),
            sample(input=(37, 64), running_mean=None, running_var=None, training=True, eps=1e-3),
        ),
        doc="torch.nn.functional.batch_norm; without running statistics the batch's are "
        "used whatever `training` says (ntops.torch.batch_norm's, whose default is "
        "training=True), where torch requires them in evaluation.",
    ),
    Api(
        "(Tensor input, Tensor? running_mean=None, Tensor? running_var=None,"
        " Tensor? weight=None, Tensor? bias=None, bool use_input_stats=True,"
        " float momentum=0.1, float eps=1e-05)",
        "torch.nn.functional.instance_norm",
        name="instance_norm",
        wrapper="_batch_norm",
        returns=_RETURNS,
        samples=(
            sample(input=(6, 42, 123), weight=(42,), bias=(42,)),
            sample(input=(2, 3, 5, 7), running_mean=(3,), running_var=(3,), eps=1e-3),
            sample(
                input=(6, 42, 123),
                running_mean=(42,),
                running_var=(42,),
                use_input_stats=False,
                domain="positive",
            ),
        ),
    ),
)

# 1024 elements a tile in 4 warps, as the row reductions (not measured on a GPU yet).
CONFIG = Config({"block_size": 1024}, num_warps=4, num_stages=2)


def arrange_groups(tensor, block_size):
    """(groups, channels, outer, inner) -> one program per (group, channel), seeing
    (outer, inner tiles) tiles of (block_size,)."""
    arranged = tensor.tile((1, 1, 1, block_size)).tile((1, 1, -1, -1))
    arranged.dtype = arranged.dtype.squeeze((0, 1))
    arranged.dtype.dtype = arranged.dtype.dtype.squeeze((0, 1, 2))
    return arranged


def arrange_values(tensor):
    """(groups, channels) -> the one value of each program, a (1, 1) tile (an AOT
    kernel passes no 0-dim tiles): `value` reads it as a number."""
    return tensor.tile((1, 1))


def value(tile):
    """The number in a (1, 1) tile, in fp32."""
    return ntl.sum(ntl.cast(tile, ntl.float32))


def arrangement(
    input, output, weight, bias, running_mean, running_var, new_mean, new_var, eps,
    momentum, training, has_weight, has_bias, block_size=1024,
):  # fmt: skip
    """The output second: the launcher specialises the strides of its first 8 arguments."""
    values = (weight, bias, running_mean, running_var, new_mean, new_var)
    scalars = (eps, momentum, training, has_weight, has_bias)
    return (
        arrange_groups(input, block_size),
        arrange_groups(output, block_size),
        *(arrange_values(tensor) for tensor in values),
        *scalars,
    )


def statistics(input, count):
    """Mean and biased variance of the group's `count` elements, in fp32: the corrected
    two-pass algorithm (kernels/layer_norm.py's `statistics`)."""
    total = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    for a in range(input.shape[0]):
        for j in range(input.shape[1]):
            total += ntl.cast(input[a, j], ntl.float32)  # padded with 0
    first = ntl.sum(total, 0) / count
    drift = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    squares = ntl.zeros(input.dtype.shape, dtype=ntl.float32)
    for a in range(input.shape[0]):
        for j in range(input.shape[1]):
            x = ntl.cast(input[a, j], ntl.float32)
            inside = input[a, j].offsets(-1) < input.source.shape[3]
            deviation = ntl.where(inside, x - first, 0.0)
            drift += deviation
            squares += deviation * deviation
    correction = ntl.sum(drift, 0) / count
    spread = ntl.sum(squares, 0) / count - correction * correction
    # Rounding's negatives to 0, NaN kept (maximum would drop it: torch's running
    # variance of a group holding NaN or infinities is NaN).
    spread = ntl.where(spread < 0.0, 0.0, spread)
    return first + correction, spread


def application(
    input, output, weight, bias, running_mean, running_var, new_mean, new_var, eps,
    momentum, training, has_weight, has_bias,
):  # fmt: skip
    count = input.source.shape[2] * input.source.shape[3]
    if training != 0:
        mean, variance = statistics(input, count)
    else:
        mean = value(running_mean)
        variance = value(running_var)
    scale = ntl.rsqrt(variance + eps)
    weight_value = value(weight)
    bias_value = value(bias)
    gamma = ntl.where(has_weight != 0, weight_value, 1.0)
    beta = ntl.where(has_bias != 0, bias_value, 0.0)
    for a in range(input.shape[0]):
        for j in range(input.shape[1]):
            output[a, j] = gamma * (ntl.cast(input[a, j], ntl.float32) - mean) * scale + beta
    # One element a group: never used (torch refuses it in training).
    unbiased = variance * count / ntl.maximum(count - 1, 1)
    running = value(running_mean)
    spread = value(running_var)
    new_mean = momentum * mean + (1.0 - momentum) * running  # noqa: F841
    new_var = momentum * unbiased + (1.0 - momentum) * spread  # noqa: F841


def config(variant):
    return CONFIG


def premake(ndim, dtype, params="same", block_size=1024):
    kind = dtype if params == "same" else ninetoothed.float32
    input, output = Tensor(ndim, dtype=dtype, other=0), Tensor(ndim, dtype=dtype)
    values = tuple(Tensor(2, dtype=kind) for _ in range(6))  # weight .. new_var
    scalars = (Tensor(0, dtype=ninetoothed.float32), Tensor(0, dtype=ninetoothed.float32))
    flags = tuple(Tensor(0, dtype=ninetoothed.int64) for _ in range(3))
    tensors = (input, output, *values, *scalars, *flags)
    return functools.partial(arrangement, block_size=block_size), application, tensors
