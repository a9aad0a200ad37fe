"""scaled_mm: torch._scaled_mm's FP8 products (float8_e4m3fn operands) with a scale per
tensor or row-wise scales (per row of input, per column of mat2), a bias, and bf16,
fp16 or fp32 results, on the products' tile loop (kernels/scaled_mm.py). Built for
sm_89 and newer."""

import torch

from . import _C
from . import _checks as check
from ._library import fake, routed

_launch = _C.launch
_GROUPS = check.groups("scaled_mm", "out_dtype", "bias")
_OUT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
E4M3 = torch.float8_e4m3fn


def _operands(op, input, other, name):
    """Both FP8 products' operand rules: float8_e4m3fn matrices on input's device."""
    for called, tensor in (("input", input), (name, other)):
        if tensor.dtype != E4M3:
            raise TypeError(f"{op}: {called} must be torch.float8_e4m3fn, not {tensor.dtype}")
        if tensor.ndim != 2:
            raise ValueError(f"{op}: {called} must have 2 dims, got {list(tensor.shape)}")
    if other.device != input.device:
        raise ValueError(f"{op}: {name} is on {other.device}, input on {input.device}")


def _checked(op, input, mat2, scale_a, scale_b, bias, scale_result, out_dtype):
    """The call's (M, K, N) after torch._scaled_mm's rules that this one keeps (any
    layout of the operands is taken; torch asks input row-major and mat2 column-major,
    as cuBLAS needs)."""
    _operands(op, input, mat2, "mat2")
    (m, k), (k2, n) = input.shape, mat2.shape
    if k != k2:
        raise ValueError(f"{op}: input {list(input.shape)} and mat2 {list(mat2.shape)} differ in K")
    if k % 16 or n % 16:
        raise ValueError(f"{op}: K ({k}) and N ({n}) must be multiples of 16, as torch's")
    if out_dtype not in _OUT:
        raise ValueError(
            f"{op}: out_dtype must be torch.bfloat16, torch.float16 or torch.float32 (FP8 "
            f"results are not built), not {out_dtype}"
        )
    if scale_result is not None:
        raise ValueError(f"{op}: scale_result scales FP8 results, which are not built")
    for name, scale, rows in (("scale_a", scale_a, m), ("scale_b", scale_b, n)):
        if scale.dtype != torch.float32:
            raise TypeError(f"{op}: {name} must be torch.float32, not {scale.dtype}")
        shapes = ((rows, 1), (rows,)) if name == "scale_a" else ((1, rows), (rows,))
        if scale.numel() != 1 and tuple(scale.shape) not in shapes:
            raise ValueError(
                f"{op}: {name} must hold one scale (per tensor) or one a "
                f"{'row of input' if name == 'scale_a' else 'column of mat2'} "
                f"{list(shapes[0])}, got {list(scale.shape)}"
            )
        if scale.device != input.device:
            raise ValueError(f"{op}: {name} is on {scale.device}, input on {input.device}")
    if bias is not None:
        if bias.dtype != out_dtype or tuple(bias.shape) != (n,):
            raise ValueError(
                f"{op}: bias must be ({n},) of out_dtype {out_dtype}, got {bias.dtype} "
                f"{list(bias.shape)}"
            )
        if bias.device != input.device:
            raise ValueError(f"{op}: bias is on {bias.device}, input on {input.device}")
    return m, k, n


@fake("scaled_mm")
def _fake(input, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
          use_fast_accum=False):  # fmt: skip
    m, _, n = _checked("scaled_mm", input, mat2, scale_a, scale_b, bias, scale_result, out_dtype)
    return torch.empty(m, n, dtype=out_dtype, device=input.device)


@routed("scaled_mm")
def scaled_mm(input, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
              use_fast_accum=False):  # fmt: skip
    """torch._scaled_mm: (input * scale_a) @ (mat2 * scale_b) + bias in out_dtype
    (bf16, fp16 or fp32; None, torch's FP8 result, is not built), accumulated in fp32:
    input (M, K) and mat2 (K, N) float8_e4m3fn (mat2 is a weight in nn.Linear's layout
    transposed, `w.t()`, for the fast kernels), scale_a one float32 value or (M, 1),
    scale_b one or (1, N). use_fast_accum is taken and ignored: the products always
    accumulate in fp32."""
    op = "scaled_mm"
    for name, tensor in (("input", input), ("mat2", mat2), ("scale_a", scale_a),
                         ("scale_b", scale_b)):  # fmt: skip
        check.tensor(op, name, tensor)
    if bias is not None:
        check.tensor(op, "bias", bias)
    m, _, n = _checked(op, input, mat2, scale_a, scale_b, bias, scale_result, out_dtype)
    by_row = scale_a.reshape(-1).expand(m) if scale_a.numel() == 1 else scale_a.reshape(m)
    by_column = scale_b.reshape(-1).expand(n) if scale_b.numel() == 1 else scale_b.reshape(n)
    group = _GROUPS[(_OUT[out_dtype], "none" if bias is None else "given")]
    if bias is None:  # not read: a view of out_dtype's size stands in
        added = torch.empty((), dtype=out_dtype, device=input.device).expand(m, n)
    else:
        added = bias.expand(m, n)
    return _launch(group, input, mat2, by_row, by_column, added, None)


def reference(input, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
              use_fast_accum=False):  # fmt: skip
    """scaled_mm's math in torch, for any layout (the tests' reference): the operands
    widened and scaled, multiplied and added in float64 (an fp32 product here may go
    through TF32), rounded once to out_dtype."""
    _checked("scaled_mm", input, mat2, scale_a, scale_b, bias, scale_result, out_dtype)
    left = input.double() * scale_a.reshape(-1, 1).double()
    right = mat2.double() * scale_b.reshape(1, -1).double()
    product = left @ right
    if bias is not None:
        product = product + bias.double()
    return product.to(out_dtype)


_BLOCKED = check.groups("w8a8_block_fp8_matmul", "output_dtype")


def _block_checked(op, input, weight, input_scale, weight_scale, block_size, output_dtype):
    """(M, K, N, the result's dtype) of a 128-block call, after its checks."""
    if list(block_size) != [128, 128]:
        raise ValueError(
            f"{op}: block_size must be [128, 128] (the built blocks), not {block_size}"
        )
    _operands(op, input, weight, "weight")
    (m, k), (n, k2) = input.shape, weight.shape
    if k != k2:
        raise ValueError(
            f"{op}: input {list(input.shape)} and weight {list(weight.shape)} (out, in) differ in K"
        )
    if k % 128:
        raise ValueError(f"{op}: K ({k}) must be a multiple of 128, a scale block's")
    blocks, column_blocks = k // 128, -(-n // 128)
    for name, scale, shape in (
        ("input_scale", input_scale, (m, blocks)),
        ("weight_scale", weight_scale, (column_blocks, blocks)),
    ):
        if scale.dtype != torch.float32:
            raise TypeError(f"{op}: {name} must be torch.float32, not {scale.dtype}")
        if tuple(scale.shape) != shape:
            raise ValueError(f"{op}: {name} must be {list(shape)}, got {list(scale.shape)}")
        if scale.device != input.device:
            raise ValueError(f"{op}: {name} is on {scale.device}, input on {input.device}")
    result = torch.float16 if output_dtype is None else output_dtype
    if result not in _OUT:
        raise ValueError(
            f"{op}: output_dtype must be torch.bfloat16, torch.float16 or torch.float32, not "
            f"{output_dtype}"
        )
    return m, k, n, result


@fake("w8a8_block_fp8_matmul")
def _fake_blocked(input, weight, input_scale, weight_scale, block_size, output_dtype=None):
    op = "w8a8_block_fp8_matmul"
    m, _, n, result = _block_checked(
        op, input, weight, input_scale, weight_scale, block_size, output_dtype
    )
    return torch.empty(m, n, dtype=result, device=input.device)


@routed("w8a8_block_fp8_matmul")
def w8a8_block_fp8_matmul(input, weight, input_scale, weight_scale, block_size,
                          output_dtype=None):  # fmt: skip
    """vLLM's w8a8_block_fp8_matmul: input (M, K) and weight (N, K) (nn.Linear's layout)
    float8_e4m3fn, scaled per block: input_scale (M, K / 128) float32, a scale per row
    and group of 128 (per_token_group_quant_fp8's, row- or column-major), weight_scale
    (ceil(N / 128), K / 128), one per 128 x 128 block; block_size [128, 128]. Returns
    (M, N) in output_dtype (float16 where None, as vLLM's), each block's products summed
    by the tensor cores, scaled and added in fp32."""
    op = "w8a8_block_fp8_matmul"
    for name, tensor in (("input", input), ("weight", weight), ("input_scale", input_scale),
                         ("weight_scale", weight_scale)):  # fmt: skip
        check.tensor(op, name, tensor)
    *_, result = _block_checked(
        op, input, weight, input_scale, weight_scale, block_size, output_dtype
    )
    group = _BLOCKED[(_OUT[result],)]
    return _launch(group, input, weight.t(), input_scale, weight_scale, None)


def block_reference(input, weight, input_scale, weight_scale, block_size, output_dtype=None):
    """w8a8_block_fp8_matmul's math in torch (the tests' reference): every block widened
    and scaled, multiplied in float64, rounded once."""
    op = "w8a8_block_fp8_matmul"
    _, _, n, result = _block_checked(
        op, input, weight, input_scale, weight_scale, block_size, output_dtype
    )
    left = input.double() * input_scale.double().repeat_interleave(128, 1)
    blocks = weight_scale.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    return (left @ (weight.double() * blocks).t()).to(result)
