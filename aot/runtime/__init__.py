"""Prebuilt ntops kernels behind torch-compatible functions.

Everything was compiled ahead of time by `ntops-aot build`: importing this package
needs neither a GPU nor Triton, and no call compiles anything. `manifest()` says
what this wheel holds; `preload()` loads its kernels for the current device (at
start-up; a first call inside a CUDA graph's capture loads its kernel there safely).
The functions are those of
`ntops_prebuilt.torch`, which has the ntops.torch names and signatures.
"""

from . import _library, torch
from ._C import CudaError
from ._errors import NotBuiltError
from ._manifest import manifest
from ._preload import preload
from .torch import *  # noqa: F403

_library.register(torch)  # the torch.library ops, one per function of `torch`

__all__ = ["CudaError", "NotBuiltError", "manifest", "preload", "torch", *torch.__all__]
