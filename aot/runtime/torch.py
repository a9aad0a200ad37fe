"""The ntops.torch API, every function backed by prebuilt kernels, and the fusions real
models need beyond it (silu_mul).

The functions are the ones the kernel files declare (`API`, listed in _ops.APIS):
an ordinary op's is rendered by the build (_functions.py), a composite op's is
hand-written, one module each (its `wrapper`).
"""

import importlib

from . import _functions, _ops
from ._attention import CausalVariant  # noqa: F401
from ._settings import (  # noqa: F401
    set_default_max_num_configs,
    set_default_num_stages,
    set_default_num_warps,
)


def _declared():
    """Every declared function by name, from its module."""
    found = {}
    for api in _ops.APIS:
        wrapper = api["wrapper"]
        module = (
            _functions if wrapper is None else importlib.import_module(f".{wrapper}", __package__)
        )
        found[api["name"]] = getattr(module, api["name"])
        # A wrapper's other public functions (flash_attn_varlen_func over paged_attention).
        found.update({name: getattr(module, name) for name in getattr(module, "EXPORTS", ())})
    return found


globals().update(_declared())

__all__ = sorted(
    [
        *_declared(),
        "CausalVariant",
        "set_default_max_num_configs",
        "set_default_num_stages",
        "set_default_num_warps",
    ]
)
