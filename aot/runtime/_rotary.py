"""rotary_position_embedding: the pairs of each head rotated, as strided views of the
input and the tables, one launch."""

import torch

from . import _C
from . import _checks as check
from ._library import fake, routed

_launch = _C.launch
rotary_rules = _C.rotary_rules
_ROPE = check.groups("rotary_position_embedding")[()]
# The launcher's views (`_C.launch`'s (tensor, sizes, dims): each dim's stride as the
# tensor's stride of a dim times a factor, -1 for none) of input and out, whose pairs
# are interleaved or halves, and of the tables, broadcast over batch and heads.
_INTERLEAVED = ((0, 1), (1, 1), (2, 1), (3, 2), (3, 1))
_TABLE = ((-1, 0), (0, 1), (-1, 0), (1, 1), (-1, 0))


def rope_shapes(input, sin_table, cos_table):
    """rotary_position_embedding's shape rules; the op's fake checks them too."""
    op = "rotary_position_embedding"
    if input.ndim != 4 or input.shape[-1] % 2:
        raise ValueError(
            f"{op}: input must be (batch, seq, heads, even head_dim), got {list(input.shape)}"
        )
    seq, half = input.shape[1], input.shape[3] // 2
    for name, table in (("sin_table", sin_table), ("cos_table", cos_table)):
        if table.shape != (seq, half):
            raise ValueError(
                f"{op}: {name} must be (seq, head_dim / 2) = {[seq, half]}, got {list(table.shape)}"
            )


@fake("rotary_position_embedding")
def _fake(input, sin_table, cos_table, interleaved=True, inplace=False):
    """The result's metadata, after the shape rules the reference does not check."""
    rope_shapes(input, sin_table, cos_table)
    return input if inplace else torch.empty_like(input)


@routed("rotary_position_embedding")
def rotary_position_embedding(input, sin_table, cos_table, interleaved=True, inplace=False):
    """Rotate the pairs of each head of input (batch, seq, heads, head_dim) by the angles
    whose sines and cosines are the tables' (seq, head_dim / 2) rows: pairs
    (x[2i], x[2i + 1]) if interleaved, else (x[i], x[i + head_dim / 2])."""
    ruled = rotary_rules(input, sin_table, cos_table, inplace)
    if ruled is None:  # the launcher does not pass the call: Python checks it
        op = "rotary_position_embedding"
        for name, tensor in (("input", input), ("sin_table", sin_table), ("cos_table", cos_table)):
            check.tensor(op, name, tensor)
        rope_shapes(input, sin_table, cos_table)
        batch, seq, heads, head_dim = input.shape
        out = input if inplace else torch.empty_like(input)
    else:
        out, batch, seq, heads, head_dim = ruled
    # The pairs and the tables' broadcast as views the launcher makes (as_strided,
    # unflatten and expand cost more host time than the launch): (batch, seq, heads,
    # head_dim / 2, 2), the pair's two elements 1 or head_dim / 2 apart.
    half = head_dim // 2
    shape = (batch, seq, heads, half, 2)
    pairs = _INTERLEAVED if interleaved else ((0, 1), (1, 1), (2, 1), (3, 1), (3, half))
    _launch(
        _ROPE, (input, shape, pairs), (sin_table, shape, _TABLE), (cos_table, shape, _TABLE),
        (out, shape, pairs),
    )  # fmt: skip
    return out


def reference(input, sin_table, cos_table, interleaved=True, inplace=False):
    """The rotation in torch (the tests' reference), in float32."""
    x = input.float()
    if interleaved:
        first, second = x[..., 0::2], x[..., 1::2]
    else:
        first, second = x.chunk(2, dim=-1)
    sin, cos = (table.float()[None, :, None, :] for table in (sin_table, cos_table))
    rotated = (first * cos - second * sin, first * sin + second * cos)
    paired = torch.stack(rotated, dim=-1).flatten(-2) if interleaved else torch.cat(rotated, -1)
    out = paired.to(input.dtype)
    return input.copy_(out) if inplace else out
