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
    """Every declared function by name, from its module; and the names a wrapper module
    exports besides (flash_attn_varlen_func over paged_attention's op), which have no op
    of their own."""
    found, exported = {}, set()
    for api in _ops.APIS:
        wrapper = api["wrapper"]
        module = (
            _functions if wrapper is None else importlib.import_module(f".{wrapper}", __package__)
        )
        found[api["name"]] = getattr(module, api["name"])
        exports = getattr(module, "EXPORTS", ())
        found.update({name: getattr(module, name) for name in exports})
        exported.update(exports)
    return found, frozenset(exported)


_FUNCTIONS, EXPORTED = _declared()
globals().update(_FUNCTIONS)

__all__ = sorted(
    [
        *_FUNCTIONS,
        "CausalVariant",
        "set_default_max_num_configs",
        "set_default_num_stages",
        "set_default_num_warps",
    ]
)
