"""How closely a floating result must agree with torch's: the tests' one table.

Per dtype, torch.testing's own defaults for that dtype, widened where a kernel
computes in fp32 and rounds once while torch rounds in between (bf16's rtol); an op
whose reference reduces in another order declares its own (its API's `tolerance`,
by the manifest's dtype name: attention's softmax in half types), and that wins.
Integers and bools compare exactly. Error bounds that are formulas of the inputs
(a product's K terms, attention's largest value) stay with the op's own maker
(tests/gpu/fuzz_ops.py's `atol`s, tests/ops/matmul.py's `check`).
"""

from collections.abc import Mapping, Sequence

import torch

from tests.gpu.layouts import BY_NAME

# (rtol, atol) by dtype.
DEFAULT = {
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (2e-5, 2e-5),
    torch.float64: (1e-12, 1e-15),
}
_SHORT = {dtype: short for short, dtype in BY_NAME.items()}


Declared = Mapping[str, Sequence[float]] | None


def bounds(
    dtype: torch.dtype, declared: Declared = None, *, result: torch.dtype | None = None
) -> tuple[float, float]:
    """(rtol, atol) for an op on inputs of `dtype`: its `declared` ones (its API's
    "tolerance") for that dtype where it has them, else the table's for the result's
    dtype (`result`, by default `dtype`: a softmax to float64 is as close as
    float64's; a complex one's parts as its real dtype's); (0, 0) for a result
    compared exactly."""
    own = (declared or {}).get(_SHORT.get(dtype, ""))
    if own is not None:
        rtol, atol = own
        return float(rtol), float(atol)
    result = result or dtype
    return DEFAULT.get(result.to_real() if result.is_complex else result, (0.0, 0.0))


def tolerance(
    dtype: torch.dtype, declared: Declared = None, *, result: torch.dtype | None = None
) -> dict[str, float]:
    """`bounds` as torch.testing.assert_close's keywords."""
    rtol, atol = bounds(dtype, declared, result=result)
    return {"rtol": rtol, "atol": atol}


def of(name: str, dtype: torch.dtype) -> dict[str, float]:
    """`tolerance` for function `name` of the installed wheel (its declaration, as the
    wheel ships it in `_ops.APIS`)."""
    from ntops_prebuilt import _ops

    declared = next(api["tolerance"] for api in _ops.APIS if api["name"] == name)
    return tolerance(dtype, declared)
