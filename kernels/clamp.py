"""clamp: min(max(input, min), max) (torch.clamp), each bound a tensor (broadcast as
torch broadcasts), a Python number or missing: a switch per bound.

A missing bound arrives as an infinity. NaN propagates as torch's CUDA kernels
propagate it: a NaN input element, or a NaN bound element, makes that element NaN
(with number bounds the runtime drops a lone NaN bound first, as torch does); with
min > max the element becomes max.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, VariantSpace

from ._lib import element_wise

BOUND = ("scalar", "tensor")
SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=element_wise.NDIMS,
    specialized_ndims=element_wise.SPECIALIZED_NDIMS,
    switches={"min": BOUND, "max": BOUND},
)

API = Api(
    "(Tensor input, Tensor|Number? min=None, Tensor|Number? max=None, *, Tensor? out=None)",
    "torch.clamp",
    wrapper="_clamp",
    samples=(
        sample(input=(6, 42, 123), min=-0.5, max=0.5),
        sample(input=(6, 42, 123), min=-0.5),
        sample(input=(6, 42, 123), max=0.25),
        sample(input=(6, 42, 123), min=(42, 1), max=(123,)),
        sample(input=(6, 42, 123), min=(6, 42, 123)),
    ),
)

arrangement = element_wise.arrangement
config = element_wise.config


def application(input, min, max, output):
    x = ntl.cast(input, ntl.float32)
    low, high = ntl.cast(min, ntl.float32), ntl.cast(max, ntl.float32)
    clamped = ntl.minimum(ntl.maximum(x, low), high)
    # Triton's minimum and maximum return the operand that is not NaN; the sum is NaN
    # when any of the three is.
    output = ntl.where((x != x) | (min != min) | (max != max), x + low + high, clamped)  # noqa: F841


def premake(ndim, dtype, block_size=element_wise.BLOCK_SIZE, **bounds):
    """Tensors in order input, min, max, output: a tensor bound has the input's dtype
    and ndim, a number bound is an fp32 scalar."""
    tensors = [Tensor(ndim, dtype=dtype)]
    for name in ("min", "max"):
        kind = bounds.get(name, "scalar")
        tensors.append(
            Tensor(ndim, dtype=dtype) if kind == "tensor" else Tensor(0, dtype=ninetoothed.float32)
        )
    tensors.append(Tensor(ndim, dtype=dtype))
    return functools.partial(arrangement, block_size=block_size), application, tuple(tensors)
