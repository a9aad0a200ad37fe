"""Plain Triton kernels that bound what this Triton can generate for the wheel's two
hottest kernels (bench_ceiling.py builds and times them): flash attention's forward
as the Triton tutorial writes it (TMA blocks, the scale folded into one multiply-add,
the causal diagonal in a loop of its own, or in the one loop of Triton's Hopper warp
specialisation) and y = x @ W.t() in the nn.Linear layout (TMA tiles, the operands
swapped or not, the K loop warp-specialised or not). Not the wheel's code: no GQA
packing, no masks on ragged edges (sizes must be multiples of the blocks).
"""

import triton
import triton.language as tl


@triton.jit
def attention_blocks(
    acc, l_i, m_i, q, keys, values, key_row, low, high, scale, rows,
    MASKED: tl.constexpr, BLOCK_N: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    for start in tl.range(low, high, BLOCK_N, warp_specialize=WS):
        k = keys.load([key_row + start, 0])
        scores = tl.dot(q, k.T)
        if MASKED:
            columns = start + tl.arange(0, BLOCK_N)
            scores = scores * scale + tl.where(rows[:, None] >= columns[None, :], 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(scores, 1))
            scores -= m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(scores, 1) * scale)
            scores = scores * scale - m_new[:, None]
        p = tl.math.exp2(scores)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = values.load([key_row + start, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention(
    Q, K, V, Out, sm_scale, HQ, HKV, N,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr,
    WS: tl.constexpr,
):  # fmt: skip
    """O = softmax(Q K^T * sm_scale) V over (batch, heads, N, D) tensors, the query heads
    in groups over HKV key/value heads. CAUSAL: 0 none, 1 the diagonal blocks in a loop
    of their own, 2 one loop masking every block (the form Triton 3.9 warp-specialises
    on Hopper; two loops fail its NVGPUWarpSpecialization pass)."""
    block = tl.num_programs(0) - 1 - tl.program_id(0)
    zh = tl.program_id(1)
    q_rows = tl.num_programs(1) * N
    kv_rows = q_rows // HQ * HKV
    queries = tl.make_tensor_descriptor(Q, [q_rows, D], [D, 1], [BLOCK_M, D])
    keys = tl.make_tensor_descriptor(K, [kv_rows, D], [D, 1], [BLOCK_N, D])
    values = tl.make_tensor_descriptor(V, [kv_rows, D], [D, 1], [BLOCK_N, D])
    out = tl.make_tensor_descriptor(Out, [q_rows, D], [D, 1], [BLOCK_M, D])
    q_row = zh * N + block * BLOCK_M
    key_row = (zh // HQ * HKV + zh % HQ // (HQ // HKV)) * N
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.full([BLOCK_M], 1.0, tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    scale = sm_scale * 1.44269504
    q = queries.load([q_row, 0])
    first = block * BLOCK_M
    if CAUSAL == 1:
        acc, l_i, m_i = attention_blocks(
            acc, l_i, m_i, q, keys, values, key_row, 0, first, scale, rows, False, BLOCK_N, WS
        )
        acc, l_i, m_i = attention_blocks(
            acc, l_i, m_i, q, keys, values, key_row, first, first + BLOCK_M, scale, rows, True,
            BLOCK_N, False,
        )  # fmt: skip
    elif CAUSAL == 2:
        acc, l_i, m_i = attention_blocks(
            acc, l_i, m_i, q, keys, values, key_row, 0, first + BLOCK_M, scale, rows, True,
            BLOCK_N, WS,
        )  # fmt: skip
    else:
        acc, l_i, m_i = attention_blocks(
            acc, l_i, m_i, q, keys, values, key_row, 0, N, scale, rows, False, BLOCK_N, WS
        )
    out.store([q_row, 0], (acc / l_i[:, None]).to(Out.dtype.element_ty))


@triton.jit
def linear(
    X, W, Y, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    GROUP: tl.constexpr, SWAP: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    """Y = X @ W.t() (X (M, K), W (N, K), Y (M, N)), grouped tiles. SWAP: Y.t() = W @
    X.t(), tiles of BM weight rows by BN tokens (the tokens fill the MMA's N)."""
    if SWAP:
        rows, columns = N, M
    else:
        rows, columns = M, N
    num_r = tl.cdiv(rows, BM)
    num_c = tl.cdiv(columns, BN)
    pid = tl.program_id(0)
    per_group = GROUP * num_c
    first = (pid // per_group) * GROUP
    size = tl.minimum(num_r - first, GROUP)
    r = first + (pid % per_group) % size
    c = (pid % per_group) // size
    xs = tl.make_tensor_descriptor(X, [M, K], [K, 1], [BN if SWAP else BM, BK])
    ws = tl.make_tensor_descriptor(W, [N, K], [K, 1], [BM if SWAP else BN, BK])
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
        if SWAP:
            a = ws.load([r * BM, k * BK])
            b = xs.load([c * BN, k * BK])
        else:
            a = xs.load([r * BM, k * BK])
            b = ws.load([c * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    if SWAP:
        ys = tl.make_tensor_descriptor(Y, [M, N], [N, 1], [BN, BM])
        ys.store([c * BN, r * BM], tl.trans(acc).to(Y.dtype.element_ty))
    else:
        ys = tl.make_tensor_descriptor(Y, [M, N], [N, 1], [BM, BN])
        ys.store([r * BM, c * BN], acc.to(Y.dtype.element_ty))
