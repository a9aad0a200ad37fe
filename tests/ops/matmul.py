"""The products, mm, bmm and addmm (kernels/mm.py serves torch.matmul too): operands of
the bucket's sizes laid out for the spec, compared with a float64 product by the
norm of the error (an elementwise bound is fuzz_ops._product_atol's)."""

import torch

from tests.calls import Call
from tests.gpu.layouts import size_in, strided, values

OPS = ("mm", "bmm", "addmm")


def num_tensors(variant):
    return 4 if variant["op"] == "addmm" else 3  # (bias,) a, b, output


def run(nt, variant, spec, dtype, bucket):
    op = variant["op"]
    k = 32 if spec.aligned else 23
    m = size_in(bucket[0], 7)
    n = size_in(bucket[1], 48 if spec.aligned else 29)
    wide = spec.width == 64
    # A wide layout puts its two outermost entries 2^31 elements apart: two rows of a
    # matrix, two matrices of a batch.
    batch = (2 if wide else 3,) if op == "bmm" else ()
    m = 2 if wide and not batch else m
    units = spec.unit[1:] if op == "addmm" else spec.unit
    a = strided((*batch, m, k), dtype, unit=units[0], aligned=spec.aligned, wide=wide)
    b = strided((*batch, k, n), dtype, unit=units[1], aligned=spec.aligned)
    out = strided((*batch, m, n), dtype, unit=units[2], aligned=spec.aligned)
    previous = torch.get_float32_matmul_precision()
    ieee = variant["switches"]["fp32_precision"] == "ieee"
    torch.set_float32_matmul_precision("highest" if ieee else "high")
    try:
        if op == "addmm":
            bias = values((n,), dtype)
            result = nt.addmm(bias, a, b, beta=0.5, alpha=2.0, out=out)
            reference = 0.5 * bias.double() + 2.0 * (a.double() @ b.double())
        else:
            result = getattr(nt, op)(a, b, out=out)
            reference = a.double() @ b.double()
    finally:
        torch.set_float32_matmul_precision(previous)
    return result, reference


def check(result, reference, variant, dtype):
    """The error's norm relative to the product's: fp32 accumulation (TF32 inputs
    unless the variant is IEEE's) in the dtype's rounding."""
    error = ((result.double() - reference).norm() / reference.norm()).item()
    ieee = dtype == torch.float32 and variant["switches"]["fp32_precision"] == "ieee"
    limit = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-5 if ieee else 2e-3)
    assert error < limit, f"{variant['id']}: relative error {error:.3g}, limit {limit:g}"


def calls(name, dtype):
    """matmul with a broadcast operand (a stride of 0), which a sample's shapes cannot
    lay out."""
    if name != "matmul":
        return []
    expanded = Call(
        "matmul 3-D @ an expanded 2-D",
        name,
        lambda make: ((make((2, 6, 16), dtype),), {"other": make((16, 5), dtype, strides=(1, 0))}),
    )
    return [expanded]
