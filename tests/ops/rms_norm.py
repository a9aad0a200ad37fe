"""rms_norm over the last dim, with or without a weight (its switch), against torch's
in fp32 rounded once, as the kernel computes."""

import torch

from tests.gpu.layouts import spec_shape, strided

F = torch.nn.functional


def num_tensors(variant):
    return 3 if variant["switches"]["weight"] == "given" else 2  # input, weight?, output


def run(nt, variant, spec, dtype, bucket):
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    n = x.shape[-1]
    weight = None
    if variant["switches"]["weight"] == "given":
        weight = strided((n,), dtype, unit=spec.unit[1], aligned=spec.aligned)
    expected = F.rms_norm(x.float(), (n,), None if weight is None else weight.float(), 1e-6)
    return nt.rms_norm(x, (n,), weight, 1e-6), expected.to(dtype)
