"""rotary_position_embedding: pairs of a head's elements rotated by angles of the
position, interleaved (the spec's unit stride on the pairs' dim) or halves."""

import torch

from tests.gpu.layouts import strided


def num_tensors(variant):
    return 4  # input, sin, cos, output


def run(nt, variant, spec, dtype, bucket):
    interleaved = spec.unit[0] is not None
    # The 3-dim kernel serves decode shapes: one token of one sequence, (heads, pairs, 2).
    batch, seq, heads, head_dim = (1, 1, 3, 64) if variant["ndim"] == 3 else (2, 7, 3, 64)
    x = strided((batch, seq, heads, head_dim), dtype, unit=3, aligned=False, wide=spec.width == 64)
    angles = torch.rand(seq, head_dim // 2, device="cuda") * 6
    sin, cos = angles.sin().to(dtype), angles.cos().to(dtype)
    half = head_dim // 2
    x0, x1 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :half], x[..., half:])
    s, c = sin[None, :, None, :].float(), cos[None, :, None, :].float()
    o0, o1 = x0.float() * c - x1.float() * s, x0.float() * s + x1.float() * c
    expected = torch.stack((o0, o1), -1).flatten(-2) if interleaved else torch.cat((o0, o1), -1)
    return nt.rotary_position_embedding(x, sin, cos, interleaved=interleaved), expected.to(dtype)
