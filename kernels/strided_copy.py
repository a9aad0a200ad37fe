"""strided_copy: output[i, j, k, l] = input[start + i*s0 + j*s1 + k*s2 + l*s3], a copy
through strides the runtime gives (aot/runtime/_layout.py), which may be negative. It is
the kernel of four functions, each a copy with its own index map: stack (each tensor
into its slice of the result), select_copy (a slice), rot90 (a transpose and flips) and
diag (a diagonal out of a matrix, or a vector onto one).

Why strides as numbers rather than a strided view: torch's tensors cannot step
backwards, so rot90's flips have no view to pass; here a flipped dim is a negative
stride from its last element. `input` is the memory the copy reads, 1-D (the runtime
passes the span of the source's elements) and read by pointer; the output's four dims
are the runtime's, merged where both sides are contiguous across them.

A copy moves bits: the kernels are built per element width (i8, i16, i32, i64) and the
runtime passes every tensor as the integer type of its width, so fp16, bf16 and i16
are one kernel and every dtype of 1, 2, 4 or 8 bytes is served by four variants.

`band` 1 reads only the elements with l - k == `diagonal` and writes 0 elsewhere: diag
of a vector, its matrix and the zeros around the diagonal in one launch.

Correct before fast, and not yet timed on a GPU: the output is written in its memory
order, the source read element by element at computed offsets (coalesced where its
innermost stride is 1, never in 128-bit loads).
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Config, VariantSpace

from ._lib import element_wise

SPACE = VariantSpace(
    dtypes=("i8", "i16", "i32", "i64"),
    ndims=(4,),
    # The runtime merges dims itself: a flipped dim may merge only with another
    # flipped one, which the launcher cannot tell.
    coalesce="none",
    # No unit-stride or aligned kernels: the source is read by pointer at offsets the
    # kernel computes, and the output's offsets go through four divisions, past what
    # Triton's alignment analysis follows (kernels/_lib/element_wise.py): they would
    # compile to the generic kernel. 64-bit for sources or outputs past 2^31 elements.
    specs=("generic", "wide"),
)

_STACK = Api(
    "(Tensor[] tensors, int dim=0, *, Tensor? out=None)",
    "torch.stack",
    name="stack",
    wrapper="_layout",
    samples=(
        sample(tensors=[(6, 42, 123)] * 3),
        sample(tensors=[(6, 42, 123)] * 2, dim=2),
        sample(tensors=[(6, 42, 123)] * 4, dim=-1),
        sample(tensors=[(37,)] * 5, dim=1),
        sample(tensors=[()] * 3),
    ),
    doc="torch.stack: the tensors (of one shape and dtype) along a new dim `dim`.",
)
_SELECT_COPY = Api(
    "(Tensor input, int dim, int index, *, Tensor? out=None)",
    "torch.select_copy",
    name="select_copy",
    wrapper="_layout",
    samples=(
        sample(input=(6, 42, 123), dim=1, index=5),
        sample(input=(6, 42, 123), dim=-1, index=-1),
        sample(input=(6, 42, 123), dim=0, index=0),
        sample(input=(37,), dim=0, index=36),
    ),
    doc="torch.select_copy: the slice at `index` of dim `dim`, as a new tensor.",
)
_ROT90 = Api(
    "(Tensor input, int k=1, int[] dims=[0, 1], *, Tensor? out=None)",
    # torch.rot90 with upstream's out= (torch's Python function has none).
    "ntops_prebuilt._layout_reference.rot90",
    name="rot90",
    wrapper="_layout",
    samples=(
        sample(input=(6, 42, 123)),
        sample(input=(6, 42, 123), k=2, dims=[2, 0]),
        sample(input=(6, 42, 123), k=-1, dims=[1, 2]),
        sample(input=(6, 42, 123), k=4, dims=[0, 2]),
        sample(input=(2, 3, 5, 7), k=7, dims=[3, 1]),
        sample(input=(5, 9), k=1, dims=[1, 0]),
    ),
    doc="torch.rot90: `input` rotated by 90 degrees `k` times, from dims[0] towards dims[1].",
)
_DIAG = Api(
    "(Tensor input, int diagonal=0, *, Tensor? out=None)",
    "torch.diag",
    name="diag",
    wrapper="_layout",
    samples=(
        sample(input=(37,)),
        sample(input=(37,), diagonal=3),
        sample(input=(37,), diagonal=-5),
        sample(input=(42, 123), diagonal=2),
        sample(input=(123, 42), diagonal=-7),
        sample(input=(6, 42), diagonal=50),
    ),
    doc="torch.diag: a vector's matrix (zeros off diagonal `diagonal`), or a matrix's diagonal.",
)
API = (_STACK, _SELECT_COPY, _ROT90, _DIAG)

BLOCK_SIZE = element_wise.BLOCK_SIZE
CONFIG = Config({"block_size": BLOCK_SIZE}, num_warps=4, num_stages=1)


def arrangement(output, input, *scalars, block_size=BLOCK_SIZE):
    """One program per block of the output's elements, in its order. The output comes
    first: ninetoothed's grid is its first tensor's. The source is tiled only so that
    ninetoothed sees a tile; the application reads it by pointer."""
    return (output.flatten().tile((block_size,)), input.tile((1,)), *scalars)


def application(output, input, start, stride_0, stride_1, stride_2, stride_3, diagonal, band):
    row = output.offsets(2)
    column = output.offsets(3)
    offset = (
        start
        + output.offsets(0) * stride_0
        + output.offsets(1) * stride_1
        + row * stride_2
        + column * stride_3
    )
    inside = output.offsets(0) < output.source.shape[0]  # past the last element: none
    on = (column - row - diagonal) * band == 0
    output = ntl.load(input.source.data_ptr() + offset, mask=inside & on, other=0)


def config(variant):
    return CONFIG


def premake(ndim, dtype, block_size=BLOCK_SIZE):
    """Tensors in order output, input (the source's span), start, four strides,
    diagonal, band: the offsets and strides in elements of the source."""
    scalars = tuple(Tensor(0, dtype=ninetoothed.int64) for _ in range(7))
    tensors = (Tensor(ndim, dtype=dtype), Tensor(1, dtype=dtype), *scalars)
    return functools.partial(arrangement, block_size=block_size), application, tensors
