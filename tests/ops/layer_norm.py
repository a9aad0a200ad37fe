"""layer_norm over the last dim, with or without weight and bias (its switches),
against torch's in fp32 rounded once, as the kernel computes."""

import torch

from tests.gpu.layouts import spec_shape, strided

F = torch.nn.functional


def num_tensors(variant):
    return 2 + list(variant["switches"].values()).count("given")  # input, weight?, bias?, output


def run(nt, variant, spec, dtype, bucket):
    switches = variant["switches"]
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    n = x.shape[-1]
    units = iter(spec.unit[1:])
    weight, bias = (
        strided((n,), dtype, unit=next(units), aligned=spec.aligned)
        if switches[name] == "given"
        else None
        for name in ("weight", "bias")
    )
    as_float = [None if v is None else v.float() for v in (weight, bias)]
    expected = F.layer_norm(x.float(), (n,), *as_float, 1e-5).to(dtype)
    return nt.layer_norm(x, (n,), weight, bias), expected
