"""clamp: its bounds are numbers or tensors (its switches `min` and `max`), a number
beside a tensor passed as None (an infinity) is, as the runtime passes it."""

import torch

from tests.gpu.layouts import spec_shape, strided


def num_tensors(variant):
    """input, its tensor bounds, the output."""
    return 2 + list(variant["switches"].values()).count("tensor")


def run(nt, variant, spec, dtype, bucket):
    shape = spec_shape(variant["ndim"], spec)

    def layout(unit):
        return strided(shape, dtype, unit=unit, aligned=spec.aligned, wide=spec.width == 64)

    x = layout(spec.unit[0])
    units = iter(spec.unit[1:])
    low, high = (
        layout(next(units)).add_(offset) if variant["switches"][name] == "tensor" else offset
        for name, offset in (("min", -0.5), ("max", 0.7))
    )
    if isinstance(low, torch.Tensor) != isinstance(high, torch.Tensor):
        # a number beside a tensor bound: as None (an infinity) is passed
        low, high = (b if isinstance(b, torch.Tensor) else None for b in (low, high))
    return nt.clamp(x, low, high), torch.clamp(x, low, high)
