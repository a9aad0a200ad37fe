"""rotary_position_embedding: rotate each pair (x0, x1) of a head by its angle:
(x0 cos - x1 sin, x0 sin + x1 cos), in fp32.

The runtime hands every tensor over as (..., pairs, 2): for interleaved input the
pairs are (x[2i], x[2i + 1]), otherwise (x[i], x[i + head_dim / 2]) - two views of
one kernel. sin and cos are expanded to the same shape with stride 0, so the
kernel reads each table entry once per pair.
"""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(3, 5),
    coalesce="leading",
    unspecialized=("sin_table", "cos_table"),
    # The unit dim is the pair (two elements): never 16-aligned, so no "aligned" spec.
    specs=("unit", "generic", "wide"),
    in_place=True,
)

API = Api(
    "(Tensor input, Tensor sin_table, Tensor cos_table, bool interleaved=True, bool inplace=False)",
    "ntops_prebuilt._rotary.reference",
    wrapper="_rotary",
    samples=(
        sample(input=(2, 7, 4, 64), sin_table=(7, 32), cos_table=(7, 32)),
        sample(input=(2, 7, 4, 64), sin_table=(7, 32), cos_table=(7, 32), interleaved=False),
    ),
)
BLOCK_SIZE = 512
CONFIG = Config(num_warps=4, num_stages=1)


def arrange_pairs(tensor, block_size=BLOCK_SIZE):
    """(*rows, 2) -> blocks of pairs, seen as the two strands (2,) of (block_size,)."""
    arranged = tensor.flatten(0, tensor.ndim - 1).tile((block_size, 1)).tile((1, -1))
    arranged.dtype = arranged.dtype.squeeze(0)
    arranged.dtype.dtype = arranged.dtype.dtype.squeeze(1)
    return arranged


def arrangement(input, sin_table, cos_table, output, block_size=BLOCK_SIZE):
    return tuple(arrange_pairs(t, block_size) for t in (input, sin_table, cos_table, output))


def application(input, sin_table, cos_table, output):
    x0, x1 = ntl.cast(input[0], ntl.float32), ntl.cast(input[1], ntl.float32)
    sin, cos = ntl.cast(sin_table[0], ntl.float32), ntl.cast(cos_table[0], ntl.float32)
    output[0] = x0 * cos - x1 * sin
    output[1] = x0 * sin + x1 * cos


def config(variant):
    return CONFIG


def premake(ndim, dtype, block_size=BLOCK_SIZE):
    tensors = tuple(Tensor(ndim, dtype=dtype) for _ in range(4))
    return functools.partial(arrangement, block_size=block_size), application, tensors
