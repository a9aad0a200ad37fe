"""The ntops.torch API, every function backed by prebuilt kernels, and the fusions real
models need beyond it (silu_mul)."""

import sys as _sys

from ntops_prebuilt import _library
from ntops_prebuilt._attention import (
    CausalVariant,
    rotary_position_embedding,
    scaled_dot_product_attention,
)
from ntops_prebuilt._element_wise import (
    abs,
    add,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    clamp,
    cos,
    div,
    dropout,
    eq,
    exp,
    ge,
    gelu,
    gt,
    isinf,
    isnan,
    le,
    lt,
    mul,
    ne,
    neg,
    pow,
    relu,
    rsqrt,
    sigmoid,
    silu,
    silu_mul,
    sin,
    sub,
    tanh,
)
from ntops_prebuilt._matmul import addmm, bmm, matmul, mm
from ntops_prebuilt._normalization import layer_norm, rms_norm, softmax
from ntops_prebuilt._settings import (
    set_default_max_num_configs,
    set_default_num_stages,
    set_default_num_warps,
)

__all__ = [
    "CausalVariant",
    "abs",
    "add",
    "addmm",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bmm",
    "clamp",
    "cos",
    "div",
    "dropout",
    "eq",
    "exp",
    "ge",
    "gelu",
    "gt",
    "isinf",
    "isnan",
    "layer_norm",
    "le",
    "lt",
    "matmul",
    "mm",
    "mul",
    "ne",
    "neg",
    "pow",
    "relu",
    "rms_norm",
    "rotary_position_embedding",
    "rsqrt",
    "scaled_dot_product_attention",
    "set_default_max_num_configs",
    "set_default_num_stages",
    "set_default_num_warps",
    "sigmoid",
    "silu",
    "silu_mul",
    "sin",
    "softmax",
    "sub",
    "tanh",
]

# The ops of the torch.library namespace `ntops_prebuilt`, one per function above.
_library.register(_sys.modules[__name__])
