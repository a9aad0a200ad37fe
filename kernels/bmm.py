"""bmm: output[b] = input[b] @ mat2[b] (torch.bmm), accumulated in fp32; fp32 through
TF32 unless torch's float32 matmul precision is "highest". The tile loop, its
configurations and their buckets are matmul.py's."""

import functools

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Operand, Tuning

from . import matmul


def _batched(m, k, n):
    """Eight products of a layer's sizes, the right operands column-major."""
    return (Operand((8, m, k)), Operand((8, k, n), transposed=True))


def _square(m, k, n):
    return (Operand((8, m, k)), Operand((8, k, n)))


SPACE = matmul.space(
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
    buckets=matmul.buckets(_batched, _square),
    specs=("i32-u212-a16", "i32-u222-a16"),
)
config = matmul.config
workspace = matmul.workspace


def candidates(variant, bucket):
    """matmul's, less warp specialisation: Triton 3.9's pass fails on the batched
    (3-D) TMA loads ("NVGPUWarpSpecialization" pipeline failure)."""
    return [c for c in matmul.candidates(variant, bucket) if not c.premake["warp_specialize"]]


application = matmul.application_bmm


def arrangement(input, other, output, workspace, launch, *constants, **blocks):
    """One program per output tile of every batch."""
    return (
        *matmul.arrange(input, other, output, **blocks),
        matmul.whole(workspace),
        launch,
        *constants,
    )


def premake(ndim, dtype, fp32_precision="tf32", spec=None, **config):
    tensors, blocks = matmul.tensors("bmm", ndim, dtype, spec, fp32_precision, **config)
    return functools.partial(arrangement, **blocks), application, tensors
