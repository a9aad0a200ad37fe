"""rms_norm over the trailing `normalized_shape` dims, flattened into one row."""

from . import _C, _ops
from . import _checks as check
from ._library import routed
from ._rows import EPS, rows

_RMS_NORM = check.groups("rms_norm", "weight")
_GIVEN, _NONE = (_ops.GIVEN,), (_ops.NONE,)
rms_norm_rules = _C.rms_norm_rules


@routed("rms_norm")
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """torch.nn.functional.rms_norm over the trailing `normalized_shape` dims;
    eps None means float32's epsilon, as torch computes half types in float."""
    if eps is None:
        eps = EPS
    welford = rms_norm_rules(input, normalized_shape, weight)
    if welford is not None:  # the launcher passed the call: over the last dim
        if weight is None:
            return rows(_RMS_NORM[_NONE], input, eps, welford)
        return rows(_RMS_NORM[_GIVEN], input, weight, eps, welford)
    check.tensor("rms_norm", "input", input)
    shape = check.normalized("rms_norm", input, normalized_shape)
    weight = check.vector("rms_norm", "weight", weight, shape)
    flat = input if len(shape) == 1 else input.flatten(-len(shape))
    welford = _welford(input, weight, flat.shape[-1])
    if weight is None:
        out = rows(_RMS_NORM[_NONE], flat, eps, welford)
    else:
        out = rows(_RMS_NORM[_GIVEN], flat, weight, eps, welford)
    return out if len(shape) == 1 else out.view(input.shape)


def _welford(input, weight, n):
    """1 where torch's CUDA rms_norm would take its Welford kernel, not its vectorized
    one (rows of a multiple of 4 elements, up to 2^24, with a contiguous input and
    weight at addresses aligned to 4 elements; torch copies others contiguous first):
    the two differ on rows holding an infinity, and the kernel follows the one torch
    runs. See kernels/rms_norm.py."""
    if n % 4 or n > 1 << 24:
        return 1
    alignment = 4 * input.element_size()
    for tensor in (input, weight):
        if tensor is not None and tensor.is_contiguous() and tensor.data_ptr() % alignment:
            return 1
    return 0
