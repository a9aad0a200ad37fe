"""mm: output = input @ other (torch.mm), accumulated in fp32.

fp32 inputs go through TF32 tensor cores unless torch's float32 matmul precision is
"highest" (switch `fp32_precision=ieee`); the switch means nothing for half types.
The tile loop is _lib/products.py's, the configurations and their buckets
tuning/products.py's.
"""

import functools

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Tuning

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

SPACE = products.space(
    2,
    dims={"input": ("rows", "inner"), "other": ("inner", "columns"), "output": ("rows", "columns")},
)

_MM = Api(
    "(Tensor input, Tensor mat2, *, Tensor? out=None)",
    "torch.mm",
    wrapper="_matmul",
    samples=(
        sample(input=(37, 64), mat2=(64, 29)),
        sample(input=(1, 4096), mat2=(4096, 96)),
    ),
)
API = (
    _MM,
    Api(
        "(Tensor input, Tensor other, *, Tensor? out=None)",
        "torch.matmul",
        wrapper="_matmul",
        name="matmul",
        samples=(
            sample(input=(64,), other=(64, 29)),
            sample(input=(37, 64), other=(64,)),
            sample(input=(3, 37, 64), other=(64, 29)),
            sample(input=(2, 3, 37, 64), other=(3, 64, 29)),
        ),
    ),
)
TUNING = Tuning(
    function="mm",
    reference="mm",
    key=("input", -2),
    key2=("other", -1),
    buckets=tuning.buckets(),
    # The samples' layouts: row-major activations times weights in nn.Linear's layout
    # (the right operand column-major) or row-major.
    specs=("i32-u101-a16", "i32-u111-a16"),
)
config = tuning.config
candidates = tuning.candidates
workspace = products.workspace


def arrangement(input, other, output, workspace, launch, *constants, **blocks):
    """One program per output tile (persistent and split configurations reshape the
    grid at launch)."""
    return (
        *products.arrange(input, other, output, **blocks),
        products.whole(workspace),
        launch,
        *constants,
    )


# `product` over the source tensors, N from the output (see _lib/products.py's tile
# loop). No docstring: ninetoothed would copy it into the kernel.
def application(
    input, other, output, workspace, launch,
    block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split,
):  # fmt: skip
    product(
        input.source.data_ptr(), 1, input.source.shape[0], input.source.shape[1],
        0, input.source.stride(0), input.source.stride(1),
        other.source.data_ptr(), output.source.shape[1],
        0, other.source.stride(0), other.source.stride(1),
        output.source.data_ptr(), 0, output.source.stride(0), output.source.stride(1),
        output.source.data_ptr(), 0, 0, 0, 0.0, 1.0, workspace.source.data_ptr(), launch,
        block_m, block_n, block_k, group_m, tma, a_t, b_t, ws, flat, precision, split,
        False, False,
    )  # fmt: skip


def premake(ndim, dtype, fp32_precision="tf32", spec=None, **config):
    tensors, blocks = products.tensors("mm", ndim, dtype, spec, fp32_precision, **config)
    return functools.partial(arrangement, **blocks), application, tensors
