"""embedding: the rows of `weight` (num_embeddings, embedding_dim) at the indices
`input` (torch.nn.functional.embedding at inference): output[i, :] = weight[input[i], :].

The runtime passes the indices flattened to 1-D (a view, or a copy where no view
flattens them: 4 or 8 bytes an index against a row of the output) and the output as
(n, embedding_dim); the variant's ndim is the indices'. Each program gathers a block
of `block_size_m` indices by `block_size_n` columns: the indices' block is loaded
once, the weight read through its pointer and strides (a gather is no tiling).

The variant's dtype is the weight's (and the output's); the switch `index` is the
indices' dtype, int64 or int32, both of which torch takes.

Indices outside [0, num_embeddings) raise in torch (a device-side assert on CUDA,
which ends the process's use of the device); a kernel cannot raise, and a check on
the host would read the indices back (a synchronisation per call, what a decode step
cannot afford), so the kernel never reads outside the weight whatever it is given:
an index out of range reads nothing and writes a row of zeros. padding_idx changes
only gradients, and max_norm renormalises the weight in place: neither is the kernel's.
"""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(1,),
    switches={"index": ("i64", "i32")},
    coalesce="none",
    # The indices' unit stride and alignment would buy little (a block of them per
    # program) and an aligned kernel would then need a multiple of 16 of them.
    unspecialized=("input",),
    in_place=False,
    # What the launcher checks and allocates the output by: a row per index, of the
    # weight's width.
    dims={"input": ("rows",), "weight": ("embeddings", "columns"), "output": ("rows", "columns")},
)

API = Api(
    "(Tensor input, Tensor weight, int? padding_idx=None, float? max_norm=None,"
    " float norm_type=2.0, bool scale_grad_by_freq=False, bool sparse=False)",
    "torch.nn.functional.embedding",
    wrapper="_embedding",
    samples=(
        sample(input=(6, 7), weight=(100, 64), indices={"input": 100}),
        sample(input=(37,), weight=(1000, 4096), indices={"input": 1000}),
        sample(input=(), weight=(10, 37), indices={"input": 10}),
        sample(input=(2, 5), weight=(50, 48), padding_idx=0, indices={"input": 50}),
    ),
)
# Untuned (no GPU measured it yet): 8 rows of 256 columns, 2048 elements in 4 warps,
# each row a contiguous run of 512 bytes (fp16) read in 128-bit loads.
BLOCK_SIZE_M = 8
BLOCK_SIZE_N = 256
CONFIG = Config(num_warps=4, num_stages=1)


def arrangement(input, weight, output, block_size_m=BLOCK_SIZE_M, block_size_n=BLOCK_SIZE_N):
    """One program per (block of indices, block of columns) of the output; each sees
    its block of indices. The weight is tiled only so that ninetoothed sees tiles."""
    rows = output.flatten(end_dim=-1).tile((block_size_m, block_size_n))
    indices = input.flatten().tile((block_size_m,)).unsqueeze(1).expand((-1, rows.shape[1]))
    return indices, weight.tile((1, 1)), rows


def application(input, weight, output):
    index = input  # one load (each mention of `input` would be one)
    valid = (index >= 0) & (index < weight.source.shape[0])
    row = ntl.where(valid, index, 0)  # offsets of rows that exist, whatever the index
    column = output.offsets(-1)
    pointers = (
        weight.source.data_ptr()
        + row[:, None] * weight.source.stride(0)
        + column[None, :] * weight.source.stride(1)
    )
    mask = valid[:, None] & (column[None, :] < weight.source.shape[1])
    output = ntl.load(pointers, mask=mask, other=0.0)


def config(variant):
    return CONFIG


def premake(ndim, dtype, index="i64", block_size_m=BLOCK_SIZE_M, block_size_n=BLOCK_SIZE_N):
    """Tensors in order input (the indices), weight, output."""
    tensors = (Tensor(ndim, dtype=index), Tensor(2, dtype=dtype), Tensor(ndim + 1, dtype=dtype))
    arrange = functools.partial(arrangement, block_size_m=block_size_m, block_size_n=block_size_n)
    return arrange, application, tensors
