"""addmm: output = beta * input + alpha * (mat1 @ mat2) (torch.addmm), in fp32.

The launcher broadcasts `input` to the output's shape (stride 0, no copy). With beta 0,
`input` is not added at all, so NaNs in it do not reach the result, as in torch.
The tile loop, its configurations and their buckets are matmul.py's.
"""

import functools

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Operand, Tuning

from . import matmul


def _linear(m, k, n):
    """nn.Linear with a bias: addmm(bias, x, w.t())."""
    return (Operand((n,)), *matmul.linear(m, k, n))


def _square(m, k, n):
    return (Operand((n,)), *matmul.row_major(m, k, n))


# The added tensor broadcasts to the product's shape, so it comes in many layouts: no
# kernel assumes one.
SPACE = matmul.space(
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
    buckets=matmul.buckets(_linear, _square),
    specs=("i32-ux101-a16", "i32-ux111-a16"),
)
workspace = matmul.workspace


def config(variant, bucket):
    (found,) = matmul.unflattened([matmul.config(variant, bucket)])
    return found


def candidates(variant, bucket):
    """matmul's, unflattened, and without clusters: on an H100 the 2-block programs
    gave a relative error of 8.6e-2 against torch with the bias epilogue (tuning run
    of 2026-11-22; mm's and bmm's passed)."""
    return [
        config
        for config in matmul.unflattened(matmul.candidates(variant, bucket))
        if config.num_ctas == 1
    ]


application = matmul.application_addmm


def arrangement(input, mat1, mat2, beta, alpha, output, workspace, launch, *constants, **blocks):
    """One program per output tile; the added tensor read tile for tile with it."""
    left, right, output = matmul.arrange(mat1, mat2, output, **blocks)
    bias = matmul.arrange_like_output(input, output, blocks["block_size_m"], blocks["block_size_n"])
    return (bias, left, right, beta, alpha, output, matmul.whole(workspace), launch, *constants)


def premake(ndim, dtype, fp32_precision="tf32", spec=None, **config):
    tensors, blocks = matmul.tensors("addmm", ndim, dtype, spec, fp32_precision, **config)
    return functools.partial(arrangement, **blocks), application, tensors
