"""sgn (torch.sgn): sign's kernels for real tensors (kernels/sign.py), and for complex64
ones kernels/sgn.py's over their real views (torch.view_as_real: float32 (..., 2), the
(re, im) pairs), so that the launcher never meets a complex tensor."""

import torch

from . import _C
from . import _checks as check
from ._errors import NotBuiltError
from ._library import routed

_launch = _C.launch
_SIGN = check.groups("sign")[()]
_PAIRS = check.groups("sgn")[()]


@routed("sgn")
def sgn(input, *, out=None):
    """torch.sgn: sign of a real tensor; of a complex64 one z / |z|, 0 where z is 0
    (kernels/sgn.py: torch's values where a part is infinite or NaN)."""
    if isinstance(input, torch.Tensor) and input.is_complex():
        return _complex(input, out)
    return _launch(_SIGN, input, out)


def _complex(input, out):
    check.tensor("sgn", "input", input)  # a subclass goes to the op before any view
    if input.dtype != torch.complex64:
        raise NotBuiltError(
            f"ntops_prebuilt.sgn: no prebuilt kernel for {input.dtype} tensors: sgn takes "
            "complex64 ones (and real ones as sign does); convert the input, e.g. with "
            ".to(torch.complex64)"
        )
    # A conjugated (or negated) view's memory holds other values than its own, and
    # view_as_real refuses it: its values first, as the launcher reads negative views.
    if input.is_conj() or input.is_neg():
        input = input.resolve_conj().resolve_neg()
    if out is None:
        out = torch.empty_like(input)  # torch's layout: the input's where it is dense
        _launch(_PAIRS, torch.view_as_real(input), torch.view_as_real(out))
        return out
    check.tensor("sgn", "out", out)
    if out.dtype != torch.complex64:
        raise RuntimeError(f"sgn: out is {out.dtype}; the result of a complex64 input is complex64")
    if out.shape != input.shape:
        raise ValueError(
            f"sgn: out has shape {tuple(out.shape)}, but the result has shape {tuple(input.shape)}"
        )
    if out.is_conj() or out.is_neg():  # written through a copy, as torch writes it
        return out.copy_(_complex(input, None))
    _launch(_PAIRS, torch.view_as_real(input), torch.view_as_real(out))
    return out
