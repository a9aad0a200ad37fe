"""bmm: output[b] = input[b] @ mat2[b] (torch.bmm), accumulated in fp32; fp32 through
TF32 unless torch's float32 matmul precision is "highest"."""

import functools

import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.kernels import matmul

SPACE = matmul.space(3)
config = matmul.config


def arrangement(input, other, output, block_size_m, block_size_n, block_size_k):
    return matmul.arrange(input, other, output, block_size_m, block_size_n, block_size_k)


def application_tf32(input, other, output):
    accumulator = ntl.zeros(output.shape, dtype=ntl.float32)
    for k in range(input.shape[0]):
        accumulator += ntl.dot(input[k], other[k], input_precision="tf32")
    output = accumulator


def application_ieee(input, other, output):
    accumulator = ntl.zeros(output.shape, dtype=ntl.float32)
    for k in range(input.shape[0]):
        accumulator += ntl.dot(input[k], other[k], input_precision="ieee")
    output = accumulator


def premake(
    ndim, dtype, fp32_precision="tf32", block_size_m=128, block_size_n=128, block_size_k=32
):
    application = {"tf32": application_tf32, "ieee": application_ieee}[fp32_precision]
    arrange = functools.partial(
        arrangement, block_size_m=block_size_m, block_size_n=block_size_n, block_size_k=block_size_k
    )
    tensors = (
        Tensor(3, dtype=dtype, other=0),
        Tensor(3, dtype=dtype, other=0),
        Tensor(3, dtype=dtype),
    )
    return arrange, application, tensors
