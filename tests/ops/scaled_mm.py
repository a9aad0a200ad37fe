"""scaled_mm: FP8 products with per-tensor or row-wise scales, compared with the
product in float64 of the same FP8 values and scales: within the result dtype's
rounding, the FP8 tensor cores' sums of each K step of 128 (four MMAs of 32, each
keeping about 14 bits: 4 x 2^-14 = 2^-12 of the magnitudes' sum; at 2^-13 a fuzz case
and the fp32 results of the 128-row tiles went past it, by up to 1.1x) and fp32
accumulation's (K terms, each within 2^-24 of it)."""

import torch

from tests.gpu.layouts import size_in, strided

E4M3 = torch.float8_e4m3fn
OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Half a unit of the result's last place, relative.
ROUNDING = {torch.bfloat16: 2**-8, torch.float16: 2**-11, torch.float32: 2**-24}


def num_tensors(variant):
    return 6  # input, mat2, scale_a, scale_b, bias, output


def exact(input, mat2, scale_a, scale_b, bias=None):
    """The product in float64, and the sum of its terms' magnitudes (the scale of fp32
    accumulation's error)."""
    left = input.double() * scale_a.double().reshape(-1, 1)
    right = mat2.double() * scale_b.double().reshape(1, -1)
    product, magnitude = left @ right, left.abs() @ right.abs()
    if bias is not None:
        product = product + bias.double()
        magnitude = magnitude + bias.double().abs()
    return product, magnitude


def within(result, expected, units=1):
    """`result` within the rounding of its dtype (`units` halves of its last place) and
    of fp32 sums of K terms of the float64 product `expected` = (values, magnitudes, K)."""
    values, magnitude, k = expected
    accumulation = (2**-12 + (k + 2) * 2**-24) * magnitude
    bound = units * ROUNDING[result.dtype] * values.abs() + accumulation + 1e-30
    error = (result.double() - values).abs()
    assert (error <= bound).all(), (error - bound).max().item()


def run(nt, variant, spec, dtype, bucket):
    switches = variant["switches"]
    out_dtype = OUT[switches["out_dtype"]]
    wide = spec.width == 64
    # A wide layout puts the two rows of input 2^31 elements apart.
    m = 2 if wide else size_in(bucket[0], 5)
    k, n = (128, 64) if spec.aligned else (96, 48)
    a = strided((m, k), E4M3, unit=spec.unit[0], aligned=spec.aligned, wide=wide)
    b = strided((k, n), E4M3, unit=spec.unit[1], aligned=spec.aligned)
    scale_a = torch.rand(m, 1, device="cuda") + 0.5
    scale_b = torch.rand(1, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda").to(out_dtype) if switches["bias"] == "given" else None
    result = nt.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype)
    return result, (*exact(a, b, scale_a, scale_b, bias), k)


def check(result, expected, variant, dtype):
    within(result, expected)


def reference(*args, **kwargs):
    from ntops_prebuilt._scaled_mm import reference as theirs

    return theirs(*args, **kwargs)


def calls(name, dtype):
    from tests.calls import Call

    def weights(make):
        x, w = make((33, 256), E4M3), make((96, 256), E4M3)
        scale_a = torch.ones(33, 1, device=x.device)
        scale_b = torch.ones(1, 96, device=x.device)
        return (x, w.t(), scale_a, scale_b), {"out_dtype": torch.bfloat16}

    def with_bias(make):
        x, w = make((8, 128), E4M3), make((64, 128), E4M3)
        one = torch.ones((), device=x.device)
        bias = torch.zeros(64, device=x.device, dtype=torch.float16)
        return (x, w.t(), one, one), {"bias": bias, "out_dtype": torch.float16}

    return [
        Call(f"{name} row-wise, nn.Linear weights", name, weights, reference),
        Call(f"{name} per tensor with a bias", name, with_bias, reference),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, reference, (E4M3,), atol=_atol)


def _draw(d, op):
    m, k, n = d.pick((1, 7, 64, 130, 600)), 16 * d.pick((1, 4, 8, 40)), 16 * d.pick((1, 3, 8))
    x = d.tensor((m, k), E4M3, specials=None, exotic=False, scale=2.0)
    weight = d.tensor((n, k), E4M3, layout="plain", specials=None, exotic=False, scale=2.0)
    rowwise = d.chance(0.5)
    shapes = ((m, 1), (1, n)) if rowwise else ((), ())
    scale_a, scale_b = (
        d.tensor(shape, torch.float32, layout="plain", specials=None, exotic=False)
        for shape in shapes
    )
    out_dtype = d.pick((torch.bfloat16, torch.float16, torch.float32))
    kwargs = {"out_dtype": out_dtype}
    if d.chance(0.3):
        kwargs["bias"] = d.tensor((n,), out_dtype, layout="plain", specials=None, exotic=False)
    return (x, d.view_of(weight, [("permute", (1, 0))], (k, n)), scale_a, scale_b), kwargs


def _atol(args, kwargs, precision):
    input, mat2, scale_a, scale_b = args
    _, magnitude = exact(input, mat2, scale_a, scale_b, kwargs.get("bias"))
    k = input.shape[1]
    accumulation = (2**-12 + (k + 2) * 2**-24) * magnitude
    return ROUNDING[kwargs["out_dtype"]] * magnitude + accumulation + 1e-6


def interpreted(make):
    """The tile loop's scaled epilogue under Triton's interpreter (CPU, plain loads,
    16 x 16 x 32 tiles): row-wise scales and a bias, bf16 results, an nn.Linear weight
    transposed, against the float64 product."""
    kernel = make(
        "scaled_mm", 2, "fp8e4m3", out_dtype="bf16", bias="given", block_size_m=16,
        block_size_n=16, block_size_k=32,
    )  # fmt: skip
    torch.manual_seed(0)
    m, k, n = 37, 96, 48
    a = (torch.randn(m, k) * 2).to(E4M3)
    w = (torch.randn(n, k) * 2).to(E4M3)
    scale_a, scale_b = torch.rand(m) + 0.5, torch.rand(n) + 0.5
    bias = torch.randn(n).to(torch.bfloat16)
    out = torch.empty(m, n, dtype=torch.bfloat16)
    kernel(a, w.t(), scale_a, scale_b, bias.expand(m, n), out)
    # Two halves: the interpreter rounds fp32 to bf16 toward zero (148.52 gave 148).
    within(out, (*exact(a, w.t(), scale_a, scale_b, bias), k), units=2)
