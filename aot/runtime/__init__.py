"""Prebuilt ntops kernels behind torch-compatible functions.

Everything was compiled ahead of time by `ntops-aot build`: importing this package
needs neither a GPU nor Triton, and no call compiles anything. `manifest()` says
what this wheel holds; `preload()` loads its kernels for the current device (at
start-up, and before capturing CUDA graphs).
"""

from ntops_prebuilt._C import CudaError
from ntops_prebuilt._errors import NotBuiltError
from ntops_prebuilt._manifest import manifest
from ntops_prebuilt._preload import preload
from ntops_prebuilt.torch import add, gelu, mm, mul, rms_norm, softmax

__all__ = [
    "CudaError",
    "NotBuiltError",
    "add",
    "gelu",
    "manifest",
    "mm",
    "mul",
    "preload",
    "rms_norm",
    "softmax",
]
