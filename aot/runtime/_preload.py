import torch

from . import _C


def preload(device=None):
    """Load every kernel module this wheel has for `device` (default: the current CUDA
    device) and return how many. Calls load lazily otherwise (inside a CUDA graph's
    capture too, which the load leaves intact); preloading moves that cost to start-up."""
    if device is None:
        return _C.preload(torch.cuda.current_device())
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"preload: {device} is not a CUDA device")
    return _C.preload(torch.cuda.current_device() if device.index is None else device.index)
