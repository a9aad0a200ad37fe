"""The argument rules the launcher checks for composite functions (rotary embeddings,
rms_norm; attention's are in test_attention_runtime.py), without a GPU: each passes a
call only where the function's Python checks pass it, passes every plain call they
pass, and leaves tensor subclasses to Python (None)."""

import pytest
import torch

from tests.subclasses import Wrapper

H = torch.float16


def test_the_launchers_rotary_rules_agree_with_pythons(installed):
    """`_C.rotary_rules` passes a call (its result and input's shape) only where
    `rope_shapes` passes it, passes every plain call it passes, and says None (Python
    checks) for a tensor subclass."""
    rotary = installed._rotary
    rules = rotary.rotary_rules
    x = torch.randn(2, 5, 3, 8, dtype=H)
    table = torch.randn(5, 4, dtype=H)
    calls = {
        "rows of queries": (x, table, table, True),
        "a transposed view": (x.transpose(0, 2).transpose(0, 2), table, table, True),
        "tables of fp32": (x, table.float(), table.float(), True),
        "tables as parameters": (x, torch.nn.Parameter(table, requires_grad=False), table, True),
        "3-D input": (x[0], table, table, None),
        "odd head_dim": (x[..., :7], table, table, None),
        "tables of other rows": (x, table[:4], table, None),
        "tables of other pairs": (x, table, table[:, :3], None),
        "3-D tables": (x, table[None], table, None),
        "a wrapper": (Wrapper(x), table, table, None),
        "a wrapped table": (x, table, Wrapper(table), None),
        "a list": (x, [1.0], table, None),
    }
    for name, (input, sin, cos, passes) in calls.items():
        for inplace in (False, True):
            ruled = rules(input, sin, cos, inplace)
            try:
                for tensor in (input, sin, cos):
                    rotary.check.tensor("rotary_position_embedding", "t", tensor)
                rotary.rope_shapes(input, sin, cos)
                refused = False
            except Exception:
                refused = True
            if passes is None:
                assert ruled is None, name
                assert refused or isinstance(input, Wrapper) or isinstance(cos, Wrapper), name
                continue
            assert not refused, name
            assert ruled is not None, name
            out, *shape = ruled
            assert tuple(shape) == tuple(input.shape), name
            if inplace:
                assert out is input, name
            else:
                assert out is not input, name
                assert out.shape == input.shape, name
                assert out.stride() == torch.empty_like(input).stride(), name


def _python_rms_norm(rms_norm, input, normalized_shape, weight):
    """Python's rules: the welford switch where they pass, else None."""
    check = rms_norm.check
    try:
        check.tensor("rms_norm", "input", input)
        shape = check.normalized("rms_norm", input, normalized_shape)
        vector = check.vector("rms_norm", "weight", weight, shape)
    except Exception:
        return None
    return rms_norm._welford(input, vector, input.shape[-1]) if len(shape) == 1 else None


@pytest.mark.parametrize("dtype", [H, torch.float32])
def test_the_launchers_rms_norm_rules_agree_with_pythons(installed, dtype):
    """`_C.rms_norm_rules` gives the welford switch `_welford` gives wherever Python's
    rules pass a call over the last dim: rows of a multiple of 4 or not, inputs and
    weights contiguous or not, aligned to 4 elements or not, weights that are a module's
    parameters (a subclass that does not override __torch_dispatch__)."""
    rms_norm = installed._rms_norm
    rules = rms_norm.rms_norm_rules
    x = torch.randn(3, 9, dtype=dtype)
    w = torch.randn(9, dtype=dtype)
    calls = {
        "rows of 8": (x[:, :8], 8, w[:8]),
        "rows of 8, no weight": (x[:, :8], (8,), None),
        "unaligned rows": (x[:, 1:], [8], w[:8]),
        "unaligned contiguous rows": (x.flatten()[1:25].view(3, 8), torch.Size([8]), w[:8]),
        "an unaligned weight": (x[:, :8], 8, w[1:]),
        "rows of 9": (x, 9, w),
        "a 1-D input": (x[0, :8], 8, w[:8]),
        "columns": (x.t()[:8], 3, w[:3]),
        "another length": (x, 8, w[:8]),
        "a weight of another length": (x[:, :8], 8, w),
        "a 2-D weight": (x[:, :8], 8, w[:8][None]),
        "two normalized dims": (x, (3, 9), None),
        "no normalized dims": (x, (), None),
        "a 0-dim input": (x[0, 0], 1, None),
        "a parameter's weight": (x, 9, torch.nn.Parameter(w, requires_grad=False)),
        "a weight that requires grad": (x[:, :8], 8, torch.nn.Parameter(w[:8])),
        "a wrapper": (Wrapper(x), 9, w),
        "a wrapped weight": (x, 9, Wrapper(w)),
        "a float shape": (x, 9.0, w),
        "a negative shape": (x, -1, None),
        "a list": ([1.0], 1, None),
    }
    for name, (input, shape, weight) in calls.items():
        ruled = rules(input, shape, weight)
        expected = _python_rms_norm(rms_norm, input, shape, weight)
        if isinstance(shape, tuple) and len(shape) != 1:
            assert ruled is None, name  # left to Python, which flattens the dims
            continue
        if isinstance(input, Wrapper) or isinstance(weight, Wrapper):
            assert ruled is None, name
            continue
        assert ruled == expected, name
    assert {rules(*call) for call in calls.values()} >= {0, 1}  # both switches seen
