"""addmm: output = beta * input + alpha * (mat1 @ mat2) (torch.addmm), in fp32.

The runtime expands `input` to the output's shape (stride 0, no copy). With beta 0,
`input` is not added at all, so NaNs in it do not reach the result, as in torch.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.kernels import matmul

# The added tensor comes broadcast in many layouts: no kernel assumes one.
SPACE = matmul.space(2, unspecialized=("input",))
config = matmul.config


def arrangement(input, mat1, mat2, beta, alpha, output, block_size_m, block_size_n, block_size_k):
    left, right, output = matmul.arrange(
        mat1, mat2, output, block_size_m, block_size_n, block_size_k
    )
    bias = matmul.arrange_like_output(input, output, block_size_m, block_size_n)
    return bias, left, right, beta, alpha, output


def application_tf32(input, mat1, mat2, beta, alpha, output):
    accumulator = ntl.zeros(output.shape, dtype=ntl.float32)
    for k in range(mat1.shape[0]):
        accumulator += ntl.dot(mat1[k], mat2[k], input_precision="tf32")
    bias = ntl.where(beta == 0, 0.0, beta * ntl.cast(input, ntl.float32))
    output = alpha * accumulator + bias


def application_ieee(input, mat1, mat2, beta, alpha, output):
    accumulator = ntl.zeros(output.shape, dtype=ntl.float32)
    for k in range(mat1.shape[0]):
        accumulator += ntl.dot(mat1[k], mat2[k], input_precision="ieee")
    bias = ntl.where(beta == 0, 0.0, beta * ntl.cast(input, ntl.float32))
    output = alpha * accumulator + bias


def premake(
    ndim, dtype, fp32_precision="tf32", block_size_m=128, block_size_n=128, block_size_k=32
):
    application = {"tf32": application_tf32, "ieee": application_ieee}[fp32_precision]
    arrange = functools.partial(
        arrangement, block_size_m=block_size_m, block_size_n=block_size_n, block_size_k=block_size_k
    )
    scalar = ninetoothed.float32
    tensors = (
        Tensor(2, dtype=dtype),
        Tensor(2, dtype=dtype, other=0),
        Tensor(2, dtype=dtype, other=0),
        Tensor(0, dtype=scalar),
        Tensor(0, dtype=scalar),
        Tensor(2, dtype=dtype),
    )
    return arrange, application, tensors
