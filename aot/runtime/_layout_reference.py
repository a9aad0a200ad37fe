"""rot90's reference: torch's, with the out= ntops.torch.rot90 takes and torch's Python
function does not (ATen has it: rot90.out). The tests compare with it, and the op's
fake tensors are its."""

import torch


def rot90(input, k=1, dims=[0, 1], *, out=None):  # noqa: B006 (torch's default, never written)
    """torch.rot90(input, k, dims), written into `out` where given."""
    if out is None:
        return torch.rot90(input, k, dims)
    return torch.ops.aten.rot90.out(input, k, list(dims), out=out)
