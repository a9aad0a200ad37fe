"""layer_norm over the trailing `normalized_shape` dims, flattened into one row."""

from . import _checks as check
from . import _ops
from ._library import routed
from ._rows import rows

_LAYER_NORM = check.groups("layer_norm", "weight", "bias")


@routed("layer_norm")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the trailing `normalized_shape` dims."""
    check.tensor("layer_norm", "input", input)
    shape = check.normalized("layer_norm", input, normalized_shape)
    weight = check.vector("layer_norm", "weight", weight, shape)
    bias = check.vector("layer_norm", "bias", bias, shape)
    flat = input if len(shape) == 1 else input.flatten(-len(shape))
    group = _LAYER_NORM[_given(weight), _given(bias)]
    vectors = [vector for vector in (weight, bias) if vector is not None]
    out = rows(group, flat, *vectors, eps)
    return out if len(shape) == 1 else out.view(input.shape)


def _given(vector):
    return _ops.NONE if vector is None else _ops.GIVEN
