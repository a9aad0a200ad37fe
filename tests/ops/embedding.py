"""embedding: rows of a weight laid out for the spec (wide: its two rows 2^31 elements
apart) gathered at indices of the `index` switch's dtype, every row at least once."""

import torch

from tests.gpu.layouts import BY_NAME, strided

F = torch.nn.functional


def num_tensors(variant):
    return 3  # indices, weight, output


def run(nt, variant, spec, dtype, bucket):
    index = BY_NAME[variant["switches"]["index"]]
    width = 48 if spec.aligned else 37
    wide = spec.width == 64
    weight = strided((50, width), dtype, unit=spec.unit[1], aligned=spec.aligned, wide=wide)
    rows = weight.shape[0]
    indices = torch.cat((torch.arange(rows), torch.randint(0, rows, (23,)))).to("cuda", index)
    return nt.embedding(indices, weight), F.embedding(indices, weight)
