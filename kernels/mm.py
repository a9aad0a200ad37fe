"""mm: output = input @ other (torch.mm), accumulated in fp32.

fp32 inputs go through TF32 tensor cores unless torch's float32 matmul precision is
"highest" (switch `fp32_precision=ieee`); the switch means nothing for half types.
The tile loop (`matmul.application_mm`), the configurations and their buckets are
matmul.py's.
"""

import functools

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.space import Tuning

from . import matmul

SPACE = matmul.space(
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
    buckets=matmul.buckets(),
    # The samples' layouts: row-major activations times weights in nn.Linear's layout
    # (the right operand column-major) or row-major.
    specs=("i32-u101-a16", "i32-u111-a16"),
)
config = matmul.config
candidates = matmul.candidates
workspace = matmul.workspace
application = matmul.application_mm


def arrangement(input, other, output, workspace, launch, *constants, **blocks):
    """One program per output tile (persistent and split configurations reshape the
    grid at launch)."""
    return (
        *matmul.arrange(input, other, output, **blocks),
        matmul.whole(workspace),
        launch,
        *constants,
    )


def premake(ndim, dtype, fp32_precision="tf32", spec=None, **config):
    tensors, blocks = matmul.tensors("mm", ndim, dtype, spec, fp32_precision, **config)
    return functools.partial(arrangement, **blocks), application, tensors
