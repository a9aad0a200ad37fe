"""softmax over any dim (the kernel reduces the last: `_rows.along`)."""

from ntops_prebuilt import _checks as check
from ntops_prebuilt._library import routed
from ntops_prebuilt._rows import along

_SOFTMAX = check.groups("softmax")[()]


@routed("softmax")
def softmax(input, dim, dtype=None):
    """torch.softmax; with `dtype`, the input is converted first, as torch does."""
    return along("softmax", _SOFTMAX, input, dim, dtype)
