"""log_softmax over any dim (the kernel reduces the last: `_rows.along`)."""

from . import _checks as check
from ._library import routed
from ._rows import along

_LOG_SOFTMAX = check.groups("log_softmax")[()]


@routed("log_softmax")
def log_softmax(input, dim, dtype=None):
    """torch.log_softmax; with `dtype`, the input is converted first, as torch does."""
    return along("log_softmax", _LOG_SOFTMAX, input, dim, dtype)
