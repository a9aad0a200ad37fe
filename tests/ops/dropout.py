"""dropout: its mask is random, so a kernel's result is checked element by element
(dropped, or the input over 1 - p); its declared samples are the deterministic calls
(no training, p = 0), and the training calls are added here."""

import torch

from tests.calls import Call
from tests.gpu.layouts import spec_shape, strided


def num_tensors(variant):
    return 2  # input, output


def run(nt, variant, spec, dtype, bucket):
    shape = spec_shape(variant["ndim"], spec)
    x = strided(shape, dtype, unit=spec.unit[0], aligned=spec.aligned, wide=spec.width == 64)
    kept = nt.dropout(x, 0.25)
    return kept, torch.where(kept == 0, kept, x / 0.75)


def calls(name, dtype):
    """Training with p = 0.1, as a new tensor and in place (the kernel runs)."""

    def training(inplace):
        return lambda make: ((make((2, 6, 16), dtype), 0.1), {"inplace": inplace})

    return [
        Call("dropout training", name, training(False)),
        Call("dropout training inplace", name, training(True)),
    ]
