"""silu_mul: silu(input) * other, computed in fp32 and rounded once (the reference does
the same, so that half types compare within their tolerance)."""

import torch

from tests.gpu.layouts import spec_shape, strided

F = torch.nn.functional


def num_tensors(variant):
    return 3  # input, other, output


def run(nt, variant, spec, dtype, bucket):
    shape = spec_shape(variant["ndim"], spec)

    def layout(unit):
        return strided(shape, dtype, unit=unit, aligned=spec.aligned, wide=spec.width == 64)

    x, other = layout(spec.unit[0]), layout(spec.unit[1])
    result = nt.silu_mul(x, other, out=layout(spec.unit[2]))
    return result, (F.silu(x.float()) * other.float()).to(dtype)
