"""quantile over the last dim of 2-dim rows (torch.quantile: float32), by radix selection
(kernels/_lib/select.py), a program per row and quantile: a pass over the row for NaN,
8 for the value at the lower rank, one for the value above it (the least larger one,
or the same where it repeats). The runtime (aot/runtime/_quantile.py) moves the
reduced dim last and merges the others into rows, or takes the whole tensor as a row.

`mode` is the interpolation: the rank is q * (n - 1) in float32, as torch computes it,
then floor (1 lower), ceil (2 higher), rounded half to even (3 nearest) or kept (0
linear, 4 midpoint: the values at the two ranks about it, by torch's lerp at the
fraction, or at 0.5). q is the program's element of the tensor `q`, or `q_value` where
`given` is 0 (a number). A row holding a NaN gives NaN, as torch's (its rank n - 1);
a q outside [0, 1] gives NaN (torch's CUDA kernels index out of bounds with it).
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Config, VariantSpace

from ._lib import reduction
from ._lib.select import float_of, has_nan, key_of, next_key, select  # noqa: F401

SPACE = VariantSpace(
    dtypes=("fp32",),
    ndims=(2,),
    coalesce="none",
    # A quantile and a result a program: nothing to vectorise in them.
    unspecialized=("q", "values"),
    outputs=("values",),
    # Each element costs a dozen operations a pass: a unit-stride kernel would save
    # the generic one's multiply by the stride and little else.
    specs=("generic", "wide"),
    dims={"input": ("rows", "columns"), "q": ("quantiles",), "values": ("quantiles", "rows")},
)

API = Api(
    "(Tensor input, Tensor|Number q, int? dim=None, bool keepdim=False,"
    " str interpolation='linear', Tensor? out=None)",
    "torch.quantile",
    wrapper="_quantile",
    # q as numbers: torch's CUDA quantile indexes out of bounds with a q outside [0, 1],
    # and sample tensors hold normal values. Tensors of q are tests/ops/quantile.py's.
    samples=(
        sample(input=(6, 42, 123), q=0.3, dim=-1),
        sample(input=(6, 42, 123), q=0.6, dim=1, keepdim=True, interpolation="midpoint"),
        sample(input=(6, 42, 123), q=0.75, interpolation="nearest"),
        sample(input=(40, 17), q=0.0, dim=0, interpolation="lower"),
        sample(input=(3, 5000), q=0.5, dim=1, interpolation="higher"),
    ),
    doc="torch.quantile along `dim` or of the whole tensor (float32); interpolation and "
    "out may also be given by position, as ntops.torch.quantile takes them.",
)

# A 1024-element tile in 4 warps, as the row reductions (a row is read 10 times; not
# measured on a GPU yet).
CONFIG = Config({"block_size": reduction.BLOCK_SIZE}, num_warps=4, num_stages=2)


def arrangement(input, q, q_value, given, mode, values, block_size=reduction.BLOCK_SIZE):
    """One program per (quantile, row): the row's tiles, a (1,) tile of q and a (1, 1)
    tile of the result (an AOT kernel passes no 0-dim tiles)."""
    rows = reduction.arrange_rows(input, block_size).unsqueeze(0)
    rows = rows.expand((values.shape[0], -1, -1))
    quantiles = q.tile((1,)).unsqueeze(1).expand((-1, values.shape[1]))
    return rows, quantiles, q_value, given, mode, values.tile((1, 1))


def ranks(q, n, mode):
    """(lower rank, upper rank, weight of the upper value) for quantile `q` of `n`
    elements, as torch computes them (in float32)."""
    last = n - 1
    position = q * ntl.cast(last, ntl.float32)
    floor = ntl.floor(position)
    odd = (ntl.cast(floor, ntl.int64) & 1) == 1
    halfway = position - floor
    up = (halfway > 0.5) | ((halfway == 0.5) & odd)
    position = ntl.where(mode == 1, floor, position)
    position = ntl.where(mode == 2, ntl.ceil(position), position)
    position = ntl.where(mode == 3, ntl.where(up, floor + 1.0, floor), position)
    # Names of their own: ninetoothed may give an inlined helper's locals its caller's
    # prefix.
    rank_low = ntl.cast(position, ntl.int64)
    rank_high = ntl.cast(ntl.ceil(position), ntl.int64)
    upper_weight = ntl.where(mode == 4, 0.5, position - ntl.cast(rank_low, ntl.float32))
    return rank_low, rank_high, upper_weight


def application(input, q, q_value, given, mode, values):
    n = input.source.shape[-1]
    fraction = ntl.where(given != 0, ntl.sum(q, 0), q_value)
    outside = (fraction != fraction) | (fraction < 0.0) | (fraction > 1.0)
    low, high, weight = ranks(ntl.where(outside, 0.0, fraction), n, mode)
    nan = has_nan(input)
    low_key = select(input, low, 32)
    high_key = next_key(input, low_key, high, 32)
    below = float_of(low_key, 32, ntl.float32)
    above = float_of(high_key, 32, ntl.float32)
    # torch's lerp: from the nearer end.
    difference = above - below
    small = ntl.abs(weight) < 0.5
    lerped = ntl.where(small, below + weight * difference, above - difference * (1.0 - weight))
    result = ntl.where((mode == 0) | (mode == 4), lerped, below)
    values = ntl.where(outside | nan, float("nan"), result)  # noqa: F841


def config(variant):
    return CONFIG


def premake(ndim, dtype, block_size=reduction.BLOCK_SIZE):
    tensors = (
        Tensor(ndim, dtype=dtype, other=float("inf")),
        Tensor(1, dtype=dtype),
        Tensor(0, dtype=ninetoothed.float32),
        Tensor(0, dtype=ninetoothed.int64),
        Tensor(0, dtype=ninetoothed.int64),
        Tensor(ndim, dtype=dtype),
    )
    return functools.partial(arrangement, block_size=block_size), application, tensors
