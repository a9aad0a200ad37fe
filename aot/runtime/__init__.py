"""Prebuilt ntops kernels behind torch-compatible functions.

Everything was compiled ahead of time by `ntops-aot build`: importing this package
needs neither a GPU nor Triton, and no call compiles anything. `manifest()` says
what this wheel holds; `preload()` loads its kernels for the current device (at
start-up, and before capturing CUDA graphs). The functions are those of
`ntops_prebuilt.torch`, which has the ntops.torch names and signatures.
"""

from ntops_prebuilt import _library, torch
from ntops_prebuilt._C import CudaError
from ntops_prebuilt._errors import NotBuiltError
from ntops_prebuilt._manifest import manifest
from ntops_prebuilt._preload import preload
from ntops_prebuilt.torch import *  # noqa: F403

_library.register(torch)  # the torch.library ops, one per function of `torch`

__all__ = ["CudaError", "NotBuiltError", "manifest", "preload", "torch", *torch.__all__]
