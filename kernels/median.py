"""median over the last dim of 2-dim rows: each row's lower median ((n - 1) // 2 in
sorted order) and the index of the first element equal to it (torch's CUDA kernel
gives any equal one's), by radix selection (kernels/_lib/select.py): a pass over the
row for NaN, 4 for the median of half types (8 of float32), one for the index. A row
holding a NaN has the median NaN and the index of its first NaN, as torch's. The
runtime (aot/runtime/_median.py) moves the reduced dim last and merges the others into
rows; the median of every element is one row of the whole tensor.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

from ._lib import reduction
from ._lib.select import first_index, float_of, has_nan, key_of, select  # noqa: F401

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2,),
    coalesce="none",
    outputs=("values", "indices"),
    # One value and one index a program: nothing to vectorise in them.
    unspecialized=("values", "indices"),
    # Each element costs a dozen operations a pass: a unit-stride kernel would save
    # the generic one's multiply by the stride and little else.
    specs=("generic", "wide"),
    dims={"input": ("rows", "columns"), "values": ("rows", "one=1"), "indices": ("rows", "one=1")},
)

API = Api(
    "(Tensor input, int? dim=None, bool keepdim=False, *, Tensor? out=None)",
    "torch.median",
    wrapper="_median",
    returns="(Tensor, Tensor)",
    # Of every element only: with `dim`, where equal elements hold a median torch's CUDA
    # kernel gives any one's index (whichever write lands last), and samples are
    # compared with it. The forms with `dim` are tests/ops/median.py's, against torch's
    # values and the first equal element's index.
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=(6, 42, 124), domain="special"),
        sample(input=(3, 5000)),
        sample(input=(37,)),
    ),
    doc="torch.median: the lower median, or (values, indices) along `dim` (the index of "
    "the first element equal to it; NaN where the row has one, the first).",
)

# A 1024-element tile in 4 warps, as the row reductions (a row is read 6 to 10 times;
# not measured on a GPU yet).
CONFIG = Config({"block_size": reduction.BLOCK_SIZE}, num_warps=4, num_stages=2)


def arrangement(input, values, indices, block_size=reduction.BLOCK_SIZE):
    """One program per row: its tiles, and a (1, 1) tile of each result (an AOT kernel
    passes no 0-dim tiles)."""
    rows = reduction.arrange_rows(input, block_size)
    return rows, values.tile((1, 1)), indices.tile((1, 1))


def median_of(input, bits, kind):
    """(value, index) of the program's row's lower median."""
    n = input.source.shape[-1]
    nan = has_nan(input)
    middle = ntl.cast((n - 1) // 2, ntl.int64)
    key = select(input, middle, bits)
    found = float_of(key, bits, kind)
    index = first_index(input, nan, key, bits)
    value = ntl.where(nan, float("nan"), ntl.cast(found, ntl.float32))
    return value, index


def application_fp16(input, values, indices):
    value, index = median_of(input, 16, ntl.float16)
    values = value  # noqa: F841
    indices = index  # noqa: F841


def application_bf16(input, values, indices):
    value, index = median_of(input, 16, ntl.bfloat16)
    values = value  # noqa: F841
    indices = index  # noqa: F841


def application_fp32(input, values, indices):
    value, index = median_of(input, 32, ntl.float32)
    values = value  # noqa: F841
    indices = index  # noqa: F841


# The parameters every dtype's application takes, under the name tests/ops/_runtime.py
# reads them by.
application = application_fp32


def config(variant):
    return CONFIG


def premake(ndim, dtype, block_size=reduction.BLOCK_SIZE):
    tensors = (
        Tensor(ndim, dtype=dtype, other=float("inf")),
        Tensor(ndim, dtype=dtype),
        Tensor(ndim, dtype=ninetoothed.int64),
    )
    application_ = {
        "fp16": application_fp16,
        "bf16": application_bf16,
        "fp32": application_fp32,
    }[dtype]
    return functools.partial(arrangement, block_size=block_size), application_, tensors
