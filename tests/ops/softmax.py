"""softmax and log_softmax over the last dim of a spec's layout; calls with dtype= (a
torch.dtype, which a declared sample, JSON in the wheel, cannot hold)."""

import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided

OPS = ("softmax", "log_softmax")


def num_tensors(variant):
    return 2  # input, output


def run(nt, variant, spec, dtype, bucket):
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    op = variant["op"]
    return getattr(nt, op)(x, -1), getattr(torch, op)(x, -1)


def calls(name, dtype):
    return [
        Call(
            f"{name} dtype={str(to)[6:]}",
            name,
            lambda make, to=to: ((make((2, 6, 16), dtype), -1), {"dtype": to}),
        )
        for to in (torch.float32, torch.float64)
    ]
