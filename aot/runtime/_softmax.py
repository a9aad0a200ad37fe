"""softmax over any dim (the kernel reduces the last: `_rows.along`)."""

from . import _checks as check
from ._library import routed
from ._rows import along

_SOFTMAX = check.groups("softmax")[()]


@routed("softmax")
def softmax(input, dim, dtype=None):
    """torch.softmax; with `dtype`, the input is converted first, as torch does."""
    return along("softmax", _SOFTMAX, input, dim, dtype)
