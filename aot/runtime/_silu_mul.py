"""silu_mul: silu(input) * other in one kernel, a fusion real models need beyond
ntops.torch (a SwiGLU MLP's `F.silu(gate) * up`)."""

import torch

from . import _C
from . import _checks as check
from ._library import routed

_launch = _C.launch
_SILU_MUL = check.groups("silu_mul")[()]


@routed("silu_mul")
def silu_mul(input, other, *, out=None):
    """silu(input) * other in one kernel, broadcasting like torch.mul: a SwiGLU MLP's
    `F.silu(gate) * up`, with gate and up often the halves of one projection's rows
    (`h[:, :n]`, `h[:, n:]`). Not in ntops.torch: a fusion real models need."""
    return _launch(_SILU_MUL, input, other, out)


def reference(input, other, *, out=None):
    """silu_mul in torch (the tests' reference, and the op's fake)."""
    if not input.dtype.is_floating_point:  # as torch's silu
        raise NotImplementedError(f"silu_mul: not implemented for {input.dtype}")
    return torch.mul(torch.nn.functional.silu(input), other, out=out)
