"""Flash attention's prefill on Hopper, written in Gluon: what Triton's compiler does not
produce from the tile-level kernel of attention.py (bench_ceiling.py: that kernel, a
tutorial-lean one and Triton's own warp specialisation all stop at 0.69-0.84x torch's
attention on an H100; this one reaches 0.89-1.02x causal, 0.85-0.91x not).

FlashAttention 3's structure: per program 128 query rows of one head, in two consumer
warp groups of 64 rows, and a producer warp loading the queries, then the keys and
values block after block into a ring of `STAGES` buffers by TMA (mbarriers say when a
buffer is full and when both groups are done with it). Each consumer group issues the
next block's Q K^T before this block's softmax and P V after it, so the softmax runs
while the tensor cores work.

The kernel a plain-kernel op file returns (kernels/scaled_dot_product_attention.py's
`plain`): its parameters are named after the op's arguments (`query`, `query_size_2`,
`query_stride_1`, ...; aot/declare/plain.py), its grid one program per (block of 128
queries, batch, query head), in the order `attention_prefill` explains.
Tensor descriptors are made on the device per program, over each head's rows: any
16-byte aligned strides, the last dim's unit; rows past the sequences load as zeros and
are never stored. Causal from `offset` (query i sees keys up to i + offset: the
launcher passes seq_kv for no mask); rows that see no key give 0.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

ROWS = gl.constexpr(128)  # queries per program: two consumer warp groups of 64
# Bytes of keys and values the programs running together may share through L2 (an
# H100's is 50 MB). H100 against torch, 2 rounds (2026-11-27), 4 x 4096 tokens of 32
# heads causal / not: 16 MB 0.91-0.94x / 0.93x, 24 MB 0.91-0.93x / 0.92x, 32 MB 0.90x /
# 0.90-0.92x, 48 MB 0.91x / 0.89x; 2048 and 4096 tokens of 32 heads over 8 within the
# rounds' noise of each other.
L2_SHARE = gl.constexpr(16 * 2**20)


@gluon.constexpr_function
def mma_layout(n):
    """A warp group's wgmma accumulator of 64 rows by n columns."""
    n = int(getattr(n, "value", n))
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


# Every partition takes the shared buffers and their barriers: the two groups' queries
# `q` (2 x 64 x head dims), the ring of keys `k` and values `v` (stages x keys x head
# dims), and `*_ready` (the producer's copies landed) and `*_free` (both groups are done
# with a stage). Aggregates would carry them in one argument, but Triton 3.9's leak
# IR objects (nanobind reports them at every build's exit).


@gluon.jit
def load_queries(q_rows, q, q_ready):
    """Both consumer groups' 64 queries, one TMA copy each, on one barrier."""
    mbarrier.expect(q_ready, 2 * q_rows.block_type.nbytes)
    tma.async_load(q_rows, [0, 0], q_ready, q.index(0))
    tma.async_load(q_rows, [64, 0], q_ready, q.index(1))


@gluon.jit
def load_blocks(
    q_rows, k_rows, v_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks
):  # fmt: skip
    """The producer: both groups' queries, then keys and values block by block, each
    into a stage both groups have released."""
    STAGES: gl.constexpr = k.shape[0]
    BLOCK_N: gl.constexpr = k.shape[1]
    load_queries(q_rows, q, q_ready)
    for j in range(blocks):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(k_free.index(stage), phase ^ 1)
        mbarrier.expect(k_ready.index(stage), k_rows.block_type.nbytes)
        tma.async_load(k_rows, [j * BLOCK_N, 0], k_ready.index(stage), k.index(stage))
        mbarrier.wait(v_free.index(stage), phase ^ 1)
        mbarrier.expect(v_ready.index(stage), v_rows.block_type.nbytes)
        tma.async_load(v_rows, [j * BLOCK_N, 0], v_ready.index(stage), v.index(stage))


@gluon.jit
def softmax_block(s, m_i, l_i, scale, rows, columns, bound, offset, MASKED: gl.constexpr):
    """One block's probabilities (base 2) and the rows' new maximum, sum and rescale
    factor. MASKED: keys past `bound` or past a row's diagonal are left out, and a row
    that has seen no key keeps a zero sum."""
    if MASKED:
        seen = (columns[None, :] < bound) & (columns[None, :] <= rows[:, None] + offset)
        s = gl.where(seen, s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1) * scale)
        shift = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = gl.maximum(m_i, gl.max(s, 1) * scale)
        shift = m_new
    p = gl.exp2(s * scale - shift[:, None])
    alpha = gl.exp2(m_i - shift)
    return p, m_new, l_i * alpha + gl.sum(p, 1), alpha


@gluon.jit
def attend_rows(
    o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
    seq_kv, offset, scale, lse_rows, lse_stride, rows_left, GROUP: gl.constexpr,
    STORE_LSE: gl.constexpr,
):  # fmt: skip
    """A consumer group: the program's rows 64 * GROUP on over `blocks` blocks of keys,
    the first `unmasked` of which every row sees whole. STORE_LSE: each row's
    log-sum-exp (natural; +inf where a row saw no key) at lse_rows + row * lse_stride,
    for the program's first `rows_left` rows."""
    STAGES: gl.constexpr = k.shape[0]
    BLOCK_N: gl.constexpr = k.shape[1]
    BLOCK_D: gl.constexpr = k.shape[2]
    DTYPE: gl.constexpr = k.dtype
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(BLOCK_D)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    queries = q.index(GROUP)
    rows = first + GROUP * 64 + gl.arange(0, 64, row_layout)
    columns = gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    m_i = gl.full([64], float("-inf"), gl.float32, row_layout)
    l_i = gl.full([64], 0.0, gl.float32, row_layout)
    acc = gl.zeros([64, BLOCK_D], gl.float32, o_layout)
    zero = gl.zeros([64, BLOCK_N], gl.float32, s_layout)
    mbarrier.wait(q_ready, 0)
    if blocks > 0:
        mbarrier.wait(k_ready.index(0), 0)
        keys = k.index(0).permute((1, 0))
        token = warpgroup_mma(queries, keys, zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(token,))
        mbarrier.arrive(k_free.index(0))
        if unmasked > 0:
            p, m_i, l_i, alpha = softmax_block(
                s, m_i, l_i, scale, rows, columns, seq_kv, offset, False
            )
        else:
            p, m_i, l_i, alpha = softmax_block(
                s, m_i, l_i, scale, rows, columns, seq_kv, offset, True
            )
        p = gl.convert_layout(p.to(DTYPE), p_layout)
        for j in range(1, blocks):
            stage = j % STAGES
            before = (j - 1) % STAGES
            # The next block's scores, issued before this block's P V: the softmax below
            # runs while the tensor cores compute P V.
            mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
            keys = k.index(stage).permute((1, 0))
            token = warpgroup_mma(queries, keys, zero, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(before), ((j - 1) // STAGES) & 1)
            values = v.index(before)
            acc = warpgroup_mma(p, values, acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(token,))
            mbarrier.arrive(k_free.index(stage))
            columns_j = j * BLOCK_N + columns
            if j < unmasked:
                p_next, m_i, l_i, alpha = softmax_block(
                    s, m_i, l_i, scale, rows, columns_j, seq_kv, offset, False
                )
            else:
                p_next, m_i, l_i, alpha = softmax_block(
                    s, m_i, l_i, scale, rows, columns_j, seq_kv, offset, True
                )
            acc, p, values = warpgroup_mma_wait(0, deps=(acc, p, values))
            mbarrier.arrive(v_free.index(before))
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
            p = gl.convert_layout(p_next.to(DTYPE), p_layout)
        last = (blocks - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((blocks - 1) // STAGES) & 1)
        values = v.index(last)
        acc = warpgroup_mma(p, values, acc, is_async=True)
        acc, p, values = warpgroup_mma_wait(0, deps=(acc, p, values))
        mbarrier.arrive(v_free.index(last))
    if STORE_LSE:
        lse = gl.where(l_i == 0.0, float("inf"), (m_i + gl.log2(l_i)) / 1.4426950408889634)
        mine = GROUP * 64 + gl.arange(0, 64, row_layout)
        gl.store(lse_rows + mine * lse_stride, lse, mask=mine < rows_left)
    total = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    out = gl.where(total == 0.0, 0.0, acc / total)
    # The group's queries are no longer read: their buffer stages the result.
    queries.store(out.to(DTYPE))
    fence_async_shared()
    tma.async_store(o_rows, [GROUP * 64, 0], queries)
    tma.store_wait(pendings=0)


@gluon.jit
def shared_ring(
    DTYPE: gl.constexpr, rows_layout: gl.constexpr, keys_layout: gl.constexpr,
    BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """The buffers and barriers every partition takes, initialised: the two groups'
    queries, `STAGES` stages of keys and values, `*_ready` for the producer's copies and
    `*_free` for both consumer groups' release."""
    q = gl.allocate_shared_memory(DTYPE, [2, 64, BLOCK_D], rows_layout)
    k = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, BLOCK_D], keys_layout)
    v = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, BLOCK_D], keys_layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_free.index(i), count=2)  # both consumer groups release
        mbarrier.init(v_free.index(i), count=2)
    return q, k, v, q_ready, k_ready, v_ready, k_free, v_free


# One partition function per consumer group: warp_specialize hands its partitions their
# arguments as values, so a group number in the argument tuple would not arrive a constexpr.
@gluon.jit
def attend_rows_0(
    o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
    seq_kv, offset, scale,
):  # fmt: skip
    attend_rows(
        o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
        seq_kv, offset, scale, 0, 0, 0, 0, False,
    )  # fmt: skip


@gluon.jit
def attend_rows_1(
    o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
    seq_kv, offset, scale,
):  # fmt: skip
    attend_rows(
        o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
        seq_kv, offset, scale, 0, 0, 0, 1, False,
    )  # fmt: skip


@gluon.jit
def attend_rows_lse_0(
    o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
    seq_kv, offset, scale, lse_rows, lse_stride, rows_left,
):  # fmt: skip
    attend_rows(
        o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
        seq_kv, offset, scale, lse_rows, lse_stride, rows_left, 0, True,
    )  # fmt: skip


@gluon.jit
def attend_rows_lse_1(
    o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
    seq_kv, offset, scale, lse_rows, lse_stride, rows_left,
):  # fmt: skip
    attend_rows(
        o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
        seq_kv, offset, scale, lse_rows, lse_stride, rows_left, 1, True,
    )  # fmt: skip


@gluon.jit
def attention_prefill(
    output, output_stride_0, output_stride_1, output_stride_2,
    query, query_size_0, query_size_1, query_size_2, query_stride_0, query_stride_1,
    query_stride_2, key, key_size_1, key_size_2, key_size_3, key_stride_0, key_stride_1,
    key_stride_2, value, value_stride_0, value_stride_1, value_stride_2, scale, offset,
    block_d: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
):  # fmt: skip
    """softmax(q k^T * scale) v of 128 queries of one head, causal from `offset`. The
    output is (batch, heads_kv, group * seq_q, head_dim): the query heads of a key/value
    head one after another."""
    DTYPE: gl.constexpr = query.dtype.element_ty
    heads_q = query_size_1
    seq_q = query_size_2
    seq_kv = key_size_2
    group = heads_q // key_size_1
    pid = gl.program_id(0)
    # Programs in sections of query heads whose keys and values fit in L2 together (a
    # query head's share of its group's), each section's blocks the most keys first, so
    # that the programs running together read their keys from L2 and the last to start
    # are the shortest. Causal, H100, 2026-11-26: every head's blocks, heaviest first,
    # gave 1.00x torch over 2048 tokens of 32 heads over 8 (8 MB of keys and values) and
    # 0.55-0.58x over 4 x 4096 of 32 heads (268 MB); a head's blocks one after another
    # 0.88x and 0.92x; these sections 0.99x and 0.90x. Not causal, a head's blocks one
    # after another measured the same as these sections (0.85-0.91x).
    blocks_q = gl.cdiv(seq_q, ROWS)
    streams = query_size_0 * heads_q
    share = gl.maximum(seq_kv.to(gl.int64) * key_size_3 * 4 // group, 1)
    section = gl.maximum(gl.minimum(L2_SHARE // share, streams), 1).to(gl.int32)
    first_stream = pid // (section * blocks_q) * section
    width = gl.minimum(section, streams - first_stream)
    within = pid - first_stream * blocks_q
    block = blocks_q - 1 - within // width
    stream = first_stream + within % width
    z = stream // heads_q
    head = stream % heads_q
    kv_head = head // group
    first = block * ROWS
    # Keys some row sees, and whole blocks every row sees.
    seen = gl.minimum(seq_kv, gl.minimum(first + ROWS, seq_q) - 1 + offset + 1)
    blocks = gl.cdiv(gl.maximum(seen, 0), BLOCK_N)
    unmasked = gl.maximum(gl.minimum(seq_kv, first + offset + 1), 0) // BLOCK_N
    rows_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, block_d], DTYPE)
    keys_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, block_d], DTYPE)
    head_dim = key_size_3
    q_base = query + z * query_stride_0 + head * query_stride_1 + first * query_stride_2
    q_rows = tma.make_tensor_descriptor(
        q_base, [seq_q - first, head_dim], [query_stride_2, 1], [64, block_d], rows_layout
    )
    o_base = output + z * output_stride_0 + kv_head * output_stride_1
    o_base += ((head % group) * seq_q + first) * output_stride_2
    o_rows = tma.make_tensor_descriptor(
        o_base, [seq_q - first, head_dim], [output_stride_2, 1], [64, block_d], rows_layout
    )
    k_base = key + z * key_stride_0 + kv_head * key_stride_1
    k_rows = tma.make_tensor_descriptor(
        k_base, [seq_kv, head_dim], [key_stride_2, 1], [BLOCK_N, block_d], keys_layout
    )
    v_base = value + z * value_stride_0 + kv_head * value_stride_1
    v_rows = tma.make_tensor_descriptor(
        v_base, [seq_kv, head_dim], [value_stride_2, 1], [BLOCK_N, block_d], keys_layout
    )
    q, k, v, q_ready, k_ready, v_ready, k_free, v_free = shared_ring(
        DTYPE, rows_layout, keys_layout, BLOCK_N, block_d, STAGES
    )
    factor = scale * 1.4426950408889634
    rows_args = (
        o_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks, unmasked, first,
        seq_kv, offset, factor,
    )  # fmt: skip
    load_args = (q_rows, k_rows, v_rows, q, k, v, q_ready, k_ready, v_ready, k_free, v_free, blocks)
    gl.warp_specialize(
        [
            (attend_rows_0, rows_args),
            (attend_rows_1, rows_args),
            (load_blocks, load_args),
        ],
        [4, 1],
        [240, 24],
    )
