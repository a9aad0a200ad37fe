"""addmv: output = beta * input + alpha * (mat @ vec) (torch.addmv), a matrix-vector
product accumulated in fp32 (IEEE: no TF32, as cuBLAS's gemv).

A simple kernel, correct before fast: each program owns `block_size_m` rows of the
matrix and walks its columns in tiles of `block_size_k`, multiplying each tile by the
vector's slice and summing across it. It is untuned and unmeasured (no GPU has timed
it); a GEMV is bound by reading the matrix once, which this does, in tiles whose
rows' loads coalesce where the matrix is row-major.

The launcher checks the shapes by the named dims, allocates nothing (the runtime
passes the output, aot/runtime/_addmv.py) and broadcasts `input` to the rows with
stride 0 (a number-like () or (1,) input). With beta 0, `input` is not added at all,
so NaNs in it do not reach the result, as in torch.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import FLOATS, Config, VariantSpace

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(2,),  # the matrix's
    coalesce="none",
    dims={"input": ("rows",), "mat": ("rows", "inner"), "vec": ("inner",), "output": ("rows",)},
    broadcast=("input",),
    # The added input may be broadcast (stride 0); the vector and the output are read
    # and written a tile per program: only the matrix's unit stride is worth a kernel.
    unspecialized=("input", "vec", "output"),
    specs=("unit", "generic", "wide"),
    # out= may be the input itself (torch allows it): a program reads its rows of input
    # before it writes them. The runtime refuses an output over the vector.
    in_place=True,
)

API = Api(
    "(Tensor input, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1, Tensor? out=None)",
    "torch.addmv",
    wrapper="_addmv",
    samples=(
        sample(input=(37,), mat=(37, 64), vec=(64,)),
        sample(input=(37,), mat=(37, 300), vec=(300,), beta=0.5, alpha=-2),
        sample(input=(1,), mat=(129, 31), vec=(31,), beta=2),
        sample(input=(), mat=(5, 1000), vec=(1000,), alpha=0.25),
    ),
)

BLOCK_SIZE_M = 32
BLOCK_SIZE_K = 128
CONFIG = Config(
    {"block_size_m": BLOCK_SIZE_M, "block_size_k": BLOCK_SIZE_K}, num_warps=4, num_stages=2
)


def arrangement(
    input, mat, vec, beta, alpha, output, block_size_m=BLOCK_SIZE_M, block_size_k=BLOCK_SIZE_K
):
    """One program per block of rows: its rows of `input` and `output`, its rows of the
    matrix as (columns / block_size_k,) tiles, and the vector as as many tiles."""
    rows = output.tile((block_size_m,))
    tiles = mat.tile((block_size_m, block_size_k)).tile((1, -1)).squeeze(1)
    tiles.dtype = tiles.dtype.squeeze(0)
    pieces = vec.tile((block_size_k,)).tile((-1,)).expand((rows.shape[0],))
    return input.tile((block_size_m,)), tiles, pieces, beta, alpha, rows


def application(input, mat, vec, beta, alpha, output):
    accumulator = ntl.zeros(output.shape, dtype=ntl.float32)
    for k in range(mat.shape[0]):
        products = ntl.cast(mat[k], ntl.float32) * ntl.cast(vec[k], ntl.float32)
        accumulator += ntl.sum(products, 1)
    added = ntl.where(beta == 0, 0.0, beta * ntl.cast(input, ntl.float32))
    output = alpha * accumulator + added


def config(variant):
    return CONFIG


def premake(ndim, dtype, block_size_m=BLOCK_SIZE_M, block_size_k=BLOCK_SIZE_K):
    """Tensors in order input, mat, vec, beta, alpha, output; the matrix and the vector
    read as 0 past their ends, so a last partial tile adds nothing."""
    tensors = (
        Tensor(1, dtype=dtype),
        Tensor(ndim, dtype=dtype, other=0),
        Tensor(1, dtype=dtype, other=0),
        Tensor(0, dtype=ninetoothed.float32),
        Tensor(0, dtype=ninetoothed.float32),
        Tensor(1, dtype=dtype),
    )
    arrange = functools.partial(arrangement, block_size_m=block_size_m, block_size_k=block_size_k)
    return arrange, application, tensors
