"""quantile along a dim or over the whole tensor: kernels/quantile.py selects ranks of
each row (the reduced dim moved last, the others merged into rows, as `_reductions`
lays rows out) for each quantile, without a sort."""

import torch

from . import _C
from . import _checks as check
from ._library import routed
from ._reductions import as_rows, result_shape, written

_launch = _C.launch
_QUANTILE = check.groups("quantile")[()]
# The kernel's `mode`, by torch.quantile's interpolation.
MODES = {"linear": 0, "lower": 1, "higher": 2, "nearest": 3, "midpoint": 4}
# torch's: ranks are computed in float32, exact up to 2^24 elements.
_LARGEST = 1 << 24


def _selected(rows, q, q_value, mode):
    """The kernel over `rows` (rows, n): (quantiles, rows) values, for each quantile of
    the 1-D tensor `q`, or for the number `q_value` where `q` is None."""
    device = rows.device
    given = int(q is not None)
    if q is None:  # a stand-in the kernel reads and leaves for q_value
        q = torch.empty((), dtype=rows.dtype, device=device).expand(1)
    # torch's layout: the quantiles' dim first and fastest (its fake's, opcheck's).
    values = torch.empty(rows.shape[0], q.shape[0], dtype=rows.dtype, device=device).t()
    _launch(_QUANTILE, rows, q, q_value, given, mode, values)
    return values


@routed("quantile")
def quantile(input, q, dim=None, keepdim=False, interpolation="linear", out=None):
    """torch.quantile along `dim`, or of every element (None): for each q in [0, 1] (a
    number, or a 0-dim or 1-D tensor, whose quantiles make the result's first dim),
    the value at rank q * (n - 1), interpolated as `interpolation` says; NaN where the
    row holds a NaN. float32 (torch takes float32 and float64; float64 is not built).
    A q tensor's values are not read back to be checked (torch's CUDA kernels do not
    check them either): one outside [0, 1] gives NaN."""
    check.tensor("quantile", "input", input)
    mode = MODES.get(interpolation)
    if mode is None:
        raise RuntimeError(
            "quantile() interpolation must be one of linear, lower, higher, midpoint or "
            f"nearest, but got {interpolation}"
        )
    values, q_value, quantiles = _quantiles(input, q)
    if dim is None:
        reduced = tuple(range(input.ndim))
        rows = input.reshape(1, -1)
    else:
        at = check.dim("quantile", dim, input.ndim or 1)
        reduced = (at,) if input.ndim else ()
        rows = as_rows(input, reduced)
    if rows.shape[1] > _LARGEST:
        raise RuntimeError("quantile() input tensor is too large")
    shape = result_shape(input.shape, reduced, keepdim)
    result = _selected(rows, values, q_value, mode)
    result = result.view((*quantiles, *shape))
    return result if out is None else written("quantile", out, result, cast=False)


def _quantiles(input, q):
    """(q as a 1-D float tensor or None, q as a number, the result's leading dims), after
    torch's checks of the input and q."""
    if isinstance(q, torch.Tensor):
        check.tensor("quantile", "q", q)
    elif isinstance(q, bool) or not isinstance(q, (int, float)):
        raise TypeError(f"quantile: q must be a number or a tensor, not {type(q).__name__}")
    elif not 0 <= q <= 1:
        raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {q}")
    if input.numel() == 0:
        raise RuntimeError("quantile() input tensor must be non-empty")
    if isinstance(q, torch.Tensor) and q.ndim > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    if input.dtype not in (torch.float32, torch.float64):
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    if not isinstance(q, torch.Tensor):
        return None, float(q), ()
    if q.dtype != input.dtype:
        raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
    if q.device != input.device:
        raise RuntimeError("quantile() q tensor must be on the same device as the input tensor")
    return q.reshape(-1), 0.0, tuple(q.shape)
