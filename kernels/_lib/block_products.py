"""The tile loop of FP8 products with 128-block scales (DeepSeek-V3's and vLLM's
`w8a8_block_fp8_matmul`): activations quantized per row and group of 128 columns, weights
per 128 x 128 block, so every K step of 128 has its own scales. Each step's product is
summed by the tensor cores on its own, then scaled and added in fp32: the scales differ
from step to step, which a product over the whole K could not apply.

The operand tiles come as the products' (`operands`: TMA on Hopper where the
specialisation allows, plain loads elsewhere), in the products' grouped order."""

import triton
import triton.language as tl

from .products import descriptor_of, operands, tile_of


@triton.jit
def block_scaled_product(
    a, M, K, sa_m, sa_k, b, N, sb_k, sb_n, c, sc_m, sc_n,
    a_scale, ss_m, ss_k, b_scale, ts_n, ts_k,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
):  # fmt: skip
    """c = sum over K steps s of (a[:, s] @ b[s, :]) * a_scale[:, s] * b_scale[n // 128, s]
    for a program's output tile: a (M, K), b (K, N) (a weight (N, K) transposed), a_scale
    (M, K / 128), b_scale (N / 128, K / 128). BLOCK_K is 128 and BLOCK_N divides it: a
    tile's columns share one weight block."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    m, n = tile_of(tl.program_id(0), num_m, num_n, GROUP_M)
    if TMA:
        a_desc = descriptor_of(a, 1, M, K, 0, sa_m, sa_k, BLOCK_M, BLOCK_K, A_T, False)
        b_desc = descriptor_of(b, 1, K, N, 0, sb_k, sb_n, BLOCK_K, BLOCK_N, B_T, False)
    else:
        a_desc, b_desc = a, b
    rows = m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_scales = a_scale + tl.minimum(rows, M - 1).to(tl.int64) * ss_m
    column_scales = b_scale + ((n * BLOCK_N) // 128) * ts_n
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in tl.range(0, tl.cdiv(K, BLOCK_K)):
        left, right = operands(
            a, b, a_desc, b_desc, 0, m, n, step * BLOCK_K, M, N, K, 0, sa_m, sa_k, 0, sb_k,
            sb_n, BLOCK_M, BLOCK_N, BLOCK_K, TMA, A_T, B_T, False,
        )  # fmt: skip
        partial = tl.dot(left, right)
        by_row = tl.load(row_scales + step * ss_k)
        by_block = tl.load(column_scales + step * ts_k)
        accumulator += partial * (by_row * by_block)[:, None]
    columns = n * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = (rows[:, None] < M) & (columns[None, :] < N)
    result = accumulator.to(c.dtype.element_ty)
    tl.store(c + rows[:, None] * sc_m + columns[None, :] * sc_n, result, mask=inside)
