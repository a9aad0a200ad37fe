"""bmm: output[b] = input[b] @ mat2[b] (torch.bmm), accumulated in fp32; fp32 through
TF32 unless torch's float32 matmul precision is "highest". The tile loop is
_lib/products.py's, its configurations and their buckets tuning/products.py's."""

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


def _batched(m, k, n):
    """Eight products of a layer's sizes, the right operands column-major."""
    return (Operand((8, m, k)), Operand((8, k, n), transposed=True))


def _square(m, k, n):
    return (Operand((8, m, k)), Operand((8, k, n)))


SPACE = products.space(
    3,
    dims={
        "input": ("batch", "rows", "inner"),
        "other": ("batch", "inner", "columns"),
        "output": ("batch", "rows", "columns"),
    },
)

API = Api(
    "(Tensor input, Tensor mat2, *, Tensor? out=None)",
    "torch.bmm",
    wrapper="_matmul",
    samples=(sample(input=(3, 37, 64), mat2=(3, 64, 29)),),
)
TUNING = Tuning(
    function="bmm",
    reference="bmm",
    key=("input", -2),
    key2=("other", -1),
    buckets=tuning.buckets(_batched, _square),
    specs=("i32-u212-a16", "i32-u222-a16"),
)
config = tuning.config
workspace = products.workspace


def candidates(variant, bucket):
    """tuning/products.py's, less warp specialisation: Triton 3.9's pass fails on the
    batched (3-D) TMA loads ("NVGPUWarpSpecialization" pipeline failure)."""
    return [c for c in tuning.candidates(variant, bucket) if not c.premake["warp_specialize"]]


def arrangement(input, other, output, workspace, launch, *constants, **blocks):
    """One program per output tile of every batch."""
    return (
        *products.arrange(input, other, output, **blocks),
        products.whole(workspace),
        launch,
        *constants,
    )


# `product` over the source tensors, batched, N from the output (see _lib/products.py's
# tile loop). No docstring: ninetoothed would copy it into the kernel.
def application(
    input, other, output, workspace, launch,
    block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split,
):  # fmt: skip
    product(
        input.source.data_ptr(), output.source.shape[0],
        input.source.shape[1], input.source.shape[2],
        input.source.stride(0), input.source.stride(1), input.source.stride(2),
        other.source.data_ptr(), output.source.shape[2],
        other.source.stride(0), other.source.stride(1), other.source.stride(2),
        output.source.data_ptr(),
        output.source.stride(0), output.source.stride(1), output.source.stride(2),
        output.source.data_ptr(), 0, 0, 0, 0.0, 1.0, workspace.source.data_ptr(), launch,
        block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split,
        False, True,
    )  # fmt: skip


def premake(ndim, dtype, fp32_precision="tf32", spec=None, **config):
    tensors, blocks = products.tensors("bmm", ndim, dtype, spec, fp32_precision, **config)
    return functools.partial(arrangement, **blocks), application, tensors
