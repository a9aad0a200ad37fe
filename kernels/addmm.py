"""addmm: output = beta * input + alpha * (mat1 @ mat2) (torch.addmm), in fp32.

The launcher broadcasts `input` to the output's shape (stride 0, no copy). With beta 0,
`input` is not added at all, so NaNs in it do not reach the result, as in torch.
The tile loop is _lib/products.py's, its configurations and their buckets
tuning/products.py's.
"""

import functools

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Operand, Tuning

from ._lib import products

# ninetoothed copies into a kernel the Triton functions of its application's module: the
# tile loop and every function it calls are imported by name.
from ._lib.parts import arrive, claim, partial_results  # noqa: F401
from ._lib.products import (  # noqa: F401
    accumulate,
    descriptor_of,
    finish,
    load_tile,
    operands,
    product,
    product_part,
    tile_of,
    tma_stride,
)
from .tuning import products as tuning


def _linear(m, k, n):
    """nn.Linear with a bias: addmm(bias, x, w.t())."""
    return (Operand((n,)), *tuning.linear(m, k, n))


def _square(m, k, n):
    return (Operand((n,)), *tuning.row_major(m, k, n))


# The added tensor broadcasts to the product's shape, so it comes in many layouts: no
# kernel assumes one.
SPACE = products.space(
    2,
    dims={
        "input": ("rows", "columns"),
        "mat1": ("rows", "inner"),
        "mat2": ("inner", "columns"),
        "output": ("rows", "columns"),
    },
    broadcast=("input",),
    unspecialized=("input",),
)

API = Api(
    "(Tensor input, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, Tensor? out=None)",
    "torch.addmm",
    wrapper="_matmul",
    samples=(
        sample(input=(29,), mat1=(37, 64), mat2=(64, 29)),
        sample(input=(37, 29), mat1=(37, 64), mat2=(64, 29), beta=0.5, alpha=2),
    ),
)
TUNING = Tuning(
    function="addmm",
    reference="addmm",
    key=("mat1", -2),
    key2=("mat2", -1),
    buckets=tuning.buckets(_linear, _square),
    specs=("i32-ux101-a16", "i32-ux111-a16"),
)
workspace = products.workspace


def config(variant, bucket):
    (found,) = tuning.unflattened([tuning.config(variant, bucket)])
    return found


def candidates(variant, bucket):
    """tuning/products.py's, unflattened, and without clusters: on an H100 the 2-block
    programs gave a relative error of 8.6e-2 against torch with the bias epilogue
    (tuning run of 2026-11-22; mm's and bmm's passed)."""
    return [
        config
        for config in tuning.unflattened(tuning.candidates(variant, bucket))
        if config.num_ctas == 1
    ]


def arrangement(input, mat1, mat2, beta, alpha, output, workspace, launch, *constants, **blocks):
    """One program per output tile; the added tensor read tile for tile with it."""
    left, right, output = products.arrange(mat1, mat2, output, **blocks)
    size_m, size_n = blocks["block_size_m"], blocks["block_size_n"]
    bias = products.arrange_like_output(input, output, size_m, size_n)
    return (bias, left, right, beta, alpha, output, products.whole(workspace), launch, *constants)


# beta * input + alpha * `product` over the source tensors, N from the output (see
# _lib/products.py's tile loop). No docstring: ninetoothed would copy it into the kernel.
def application(
    input, mat1, mat2, beta, alpha, output, workspace, launch,
    block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split,
):  # fmt: skip
    product(
        mat1.source.data_ptr(), 1, mat1.source.shape[0], mat1.source.shape[1],
        0, mat1.source.stride(0), mat1.source.stride(1),
        mat2.source.data_ptr(), output.source.shape[1],
        0, mat2.source.stride(0), mat2.source.stride(1),
        output.source.data_ptr(), 0, output.source.stride(0), output.source.stride(1),
        input.source.data_ptr(), 0, input.source.stride(0), input.source.stride(1),
        beta, alpha, workspace.source.data_ptr(), launch,
        block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split,
        True, False,
    )  # fmt: skip


def premake(ndim, dtype, fp32_precision="tf32", spec=None, **config):
    tensors, blocks = products.tensors("addmm", ndim, dtype, spec, fp32_precision, **config)
    return functools.partial(arrangement, **blocks), application, tensors
