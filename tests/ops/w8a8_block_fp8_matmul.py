"""w8a8_block_fp8_matmul: FP8 products with 1 x 128 activation and 128 x 128 weight
scales, against the float64 product of the same scaled blocks: within the result's
rounding, the tensor cores' sum of each block (2^-12 of its terms' magnitudes: four
MMAs keeping about 14 bits) and fp32's over the blocks (tests/ops/scaled_mm.py's
`within`)."""

import torch

from tests.gpu.layouts import size_in, strided
from tests.ops.scaled_mm import OUT, within

E4M3 = torch.float8_e4m3fn


def num_tensors(variant):
    return 5  # input, weight, input_scale, weight_scale, output


def exact(input, weight, input_scale, weight_scale):
    """The product in float64 of the scaled blocks, and its terms' magnitudes."""
    n = weight.shape[0]
    left = input.double() * input_scale.double().repeat_interleave(128, 1)
    blocks = weight_scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    right = (weight.double() * blocks).t()
    return left @ right, left.abs() @ right.abs()


def scales(m, k, n, device="cuda"):
    """Block scales as per_token_group_quant_fp8 and a checkpoint would give them."""
    input_scale = torch.rand(m, k // 128, device=device) + 0.5
    weight_scale = torch.rand(-(-n // 128), k // 128, device=device) * 0.1 + 0.01
    return input_scale, weight_scale


def run(nt, variant, spec, dtype, bucket):
    out_dtype = OUT[variant["switches"]["output_dtype"]]
    wide = spec.width == 64
    m = 2 if wide else size_in(bucket[0], 5)
    k, n = (256, 192) if spec.aligned else (384, 176)
    a = strided((m, k), E4M3, unit=spec.unit[0], aligned=spec.aligned, wide=wide)
    # The kernel takes the weight (N, K) transposed: its unit dim 0 is the weight's 1.
    w_unit = None if spec.unit[1] is None else 1 - spec.unit[1]
    w = strided((n, k), E4M3, unit=w_unit, aligned=spec.aligned)
    input_scale, weight_scale = scales(m, k, n)
    result = nt.w8a8_block_fp8_matmul(a, w, input_scale, weight_scale, [128, 128], out_dtype)
    return result, (*exact(a, w, input_scale, weight_scale), 128)


def check(result, expected, variant, dtype):
    within(result, expected)


def reference(*args, **kwargs):
    from ntops_prebuilt._scaled_mm import block_reference

    return block_reference(*args, **kwargs)


def calls(name, dtype):
    from tests.calls import Call

    def blocks(make):
        x, w = make((33, 256), E4M3), make((200, 256), E4M3)
        input_scale, weight_scale = (
            torch.ones(shape, device=x.device) for shape in ((33, 2), (2, 2))
        )
        return (x, w, input_scale, weight_scale, [128, 128]), {"output_dtype": torch.bfloat16}

    return [Call(f"{name} DeepSeek-style blocks", name, blocks, reference)]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, reference, (E4M3,), atol=_atol)


def _draw(d, op):
    m, k, n = d.pick((1, 7, 64, 130, 600)), 128 * d.pick((1, 2, 5)), 16 * d.pick((4, 9, 24))
    x = d.tensor((m, k), E4M3, specials=None, exotic=False, scale=2.0)
    weight = d.tensor((n, k), E4M3, layout="plain", specials=None, exotic=False, scale=2.0)
    values = scales(m, k, n, device="cpu")
    input_scale, weight_scale = (
        d.tensor(v.shape, torch.float32, layout="plain", specials=None, exotic=False, values=v)
        for v in values
    )
    output_dtype = d.pick((torch.bfloat16, torch.float16, torch.float32, None))
    return (x, weight, input_scale, weight_scale, [128, 128]), {"output_dtype": output_dtype}


def _atol(args, kwargs, precision):
    input, weight, input_scale, weight_scale, _ = args
    _, magnitude = exact(input, weight, input_scale, weight_scale)
    out = kwargs["output_dtype"] or torch.float16
    rounding = {torch.bfloat16: 2**-8, torch.float16: 2**-11, torch.float32: 2**-24}[out]
    return (rounding + 2**-12 + (input.shape[1] // 128 + 2) * 2**-24) * magnitude + 1e-6


def interpreted(make):
    """The tile loop under Triton's interpreter (CPU, plain loads, 16 x 32 x 128 tiles):
    three K blocks, two weight blocks of columns, against the float64 product."""
    kernel = make(
        "w8a8_block_fp8_matmul", 2, "fp8e4m3", output_dtype="fp32", block_size_m=16,
        block_size_n=32, block_size_k=128,
    )  # fmt: skip
    torch.manual_seed(0)
    m, k, n = 21, 384, 160
    a, w = ((torch.randn(rows, k) * 2).to(E4M3) for rows in (m, n))
    input_scale, weight_scale = scales(m, k, n, device="cpu")
    out = torch.empty(m, n)
    kernel(a, w.t(), input_scale, weight_scale, out)
    within(out, (*exact(a, w, input_scale, weight_scale), 128), units=2)
