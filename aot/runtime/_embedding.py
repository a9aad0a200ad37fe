"""embedding: rows of a 2-D weight gathered at integer indices of any shape, one
launch over the indices flattened (the kernel's switch `index` is their dtype)."""

import torch

from . import _C, _ops
from . import _checks as check
from ._library import routed

_launch = _C.launch
_EMBEDDING = {
    getattr(torch, _ops.DTYPES[index]): group
    for (index,), group in check.groups("embedding", "index").items()
}


@routed("embedding")
def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type=2.0,
    scale_grad_by_freq=False,
    sparse=False,
):
    """torch.nn.functional.embedding at inference: `weight[input]`. padding_idx,
    scale_grad_by_freq and sparse change only gradients. An index out of range gives
    a row of zeros (torch stops the device with an assert): checking would cost a
    synchronisation per call. max_norm, which rewrites weight rows in place, is refused."""
    check.tensor("embedding", "input", input)
    check.tensor("embedding", "weight", weight)
    if max_norm is not None:
        raise NotImplementedError(
            "embedding: max_norm (renormalising weight rows in place on every call) is not "
            "supported; renormalise the weight once beforehand"
        )
    if weight.ndim != 2:
        raise RuntimeError(f"embedding: 'weight' must be 2-D, not {weight.ndim}-D")
    rows = weight.shape[0]
    if padding_idx is not None and not -rows <= padding_idx < rows:
        raise ValueError(f"embedding: padding_idx {padding_idx} must be within num_embeddings")
    group = _EMBEDDING.get(input.dtype)
    if group is None:
        raise RuntimeError(
            f"embedding: expected indices of dtype torch.int64 or torch.int32, not {input.dtype}"
        )
    out = _launch(group, input.reshape(-1), weight, None)  # the launcher checks and allocates
    return out.view(*input.shape, weight.shape[1])
