"""scaled_dot_product_attention: softmax(query key^T * scale + mask) value, computed a
block of keys at a time with a running maximum and sum (flash attention), in fp32.

Programs cover (batch, key/value head, block of queries) and loop over the query
heads sharing that key/value head, so grouped-query attention reads each key block
once per group. `mask` is one switch: none, causal (with an offset: 0 for the
upper-left variant, seq_kv - seq_q for lower-right), or a bool or float tensor
broadcast to (batch, heads_q, seq_q, seq_kv). Rows with every key masked give 0.

Products are IEEE ("ieee" input precision), as torch's fp32 attention computes them:
fp32 inputs never go through TF32; for fp16 and bf16 the precision changes nothing.
"""

import functools

import ninetoothed
import ninetoothed.language as ntl
from ninetoothed import Tensor

from ntops_aot.aot.space import FLOATS, Config, VariantSpace

SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(4,),
    switches={"head_dim": ("64", "128"), "mask": ("none", "causal", "bool", "float")},
    coalesce="none",
    unspecialized=("mask",),
    specs=("aligned", "generic", "wide"),
    in_place=False,
)


def arrangement(query, key, value, *rest, mask, block_size_m, block_size_n):
    group = query.shape[1] // key.shape[1]

    def rows(tensor):  # (b, heads_q, seq_q, d) -> (b, heads_kv, q blocks): (group,) x (m, d)
        arranged = tensor.tile((1, 1, block_size_m, -1)).tile((1, group, 1, 1))
        arranged.dtype = arranged.dtype.squeeze((0, 2, 3))
        arranged.dtype.dtype = arranged.dtype.dtype.squeeze((0, 1))
        return arranged

    queries = rows(query)

    def columns(tensor):  # (b, heads_kv, seq_kv, d) -> per program: (kv blocks,) x (n, d)
        arranged = tensor.tile((1, 1, block_size_n, -1)).tile((1, 1, -1, -1))
        arranged = arranged.expand((-1, -1, queries.shape[2], -1))
        arranged.dtype = arranged.dtype.squeeze((0, 1, 3))
        arranged.dtype.dtype = arranged.dtype.dtype.squeeze((0, 1))
        return arranged

    *scalars, output = rest
    if mask in ("bool", "float"):  # (b, heads_q, seq_q, seq_kv) -> (group, kv blocks) x (m, n)
        bias, *scalars = scalars
        bias = bias.tile((1, 1, block_size_m, block_size_n)).tile((1, group, 1, -1))
        bias.dtype = bias.dtype.squeeze((0, 2))
        bias.dtype.dtype = bias.dtype.dtype.squeeze((0, 1))
        scalars = [bias, *scalars]
    return (queries, columns(key), columns(value), *scalars, rows(output))


def step(scores, values, accumulator, running_max, running_sum):
    """Fold one block of scores (base-2 logits: scale * log2(e) applied) into the
    running softmax-weighted sum."""
    new_max = ntl.maximum(running_max, ntl.max(scores, 1))
    shift = ntl.where(new_max == float("-inf"), 0.0, new_max)
    weights = ntl.exp2(scores - shift[:, None])
    decay = ntl.exp2(running_max - shift)
    accumulator = accumulator * decay[:, None] + ntl.dot(
        ntl.cast(weights, values.dtype), values, input_precision="ieee"
    )
    return accumulator, new_max, running_sum * decay + ntl.sum(weights, 1)


def application(query, key, value, scale, output):
    for g in range(query.shape[0]):
        q = query[g]
        accumulator = ntl.zeros(q.shape, dtype=ntl.float32)
        running_max = ntl.full((q.shape[0],), float("-inf"), dtype=ntl.float32)
        running_sum = ntl.zeros((q.shape[0],), dtype=ntl.float32)
        for j in range(key.shape[0]):
            scores = ntl.dot(q, ntl.trans(key[j]), input_precision="ieee") * (
                scale * 1.4426950408889634
            )
            scores = ntl.where(
                key[j].offsets(-2)[None, :] < key.source.shape[-2], scores, float("-inf")
            )
            accumulator, running_max, running_sum = step(
                scores, value[j], accumulator, running_max, running_sum
            )
        output[g] = ntl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])


def application_causal(query, key, value, scale, offset, output):
    for g in range(query.shape[0]):
        q = query[g]
        rows = query[g].offsets(-2)
        accumulator = ntl.zeros(q.shape, dtype=ntl.float32)
        running_max = ntl.full((q.shape[0],), float("-inf"), dtype=ntl.float32)
        running_sum = ntl.zeros((q.shape[0],), dtype=ntl.float32)
        # Key blocks wholly above the diagonal contribute nothing: stop before them.
        visible = (ntl.max(rows, 0) + offset) // key.dtype.shape[0] + 1
        for j in range(ntl.minimum(ntl.maximum(visible, 0), key.shape[0])):
            columns = key[j].offsets(-2)
            scores = ntl.dot(q, ntl.trans(key[j]), input_precision="ieee") * (
                scale * 1.4426950408889634
            )
            keep = (columns[None, :] < key.source.shape[-2]) & (
                columns[None, :] <= rows[:, None] + offset
            )
            scores = ntl.where(keep, scores, float("-inf"))
            accumulator, running_max, running_sum = step(
                scores, value[j], accumulator, running_max, running_sum
            )
        output[g] = ntl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])


def application_bool(query, key, value, mask, scale, output):
    for g in range(query.shape[0]):
        q = query[g]
        accumulator = ntl.zeros(q.shape, dtype=ntl.float32)
        running_max = ntl.full((q.shape[0],), float("-inf"), dtype=ntl.float32)
        running_sum = ntl.zeros((q.shape[0],), dtype=ntl.float32)
        for j in range(key.shape[0]):
            scores = ntl.dot(q, ntl.trans(key[j]), input_precision="ieee") * (
                scale * 1.4426950408889634
            )
            keep = (key[j].offsets(-2)[None, :] < key.source.shape[-2]) & (mask[g, j] != 0)
            scores = ntl.where(keep, scores, float("-inf"))
            accumulator, running_max, running_sum = step(
                scores, value[j], accumulator, running_max, running_sum
            )
        output[g] = ntl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])


def application_float(query, key, value, mask, scale, output):
    for g in range(query.shape[0]):
        q = query[g]
        accumulator = ntl.zeros(q.shape, dtype=ntl.float32)
        running_max = ntl.full((q.shape[0],), float("-inf"), dtype=ntl.float32)
        running_sum = ntl.zeros((q.shape[0],), dtype=ntl.float32)
        for j in range(key.shape[0]):
            scores = ntl.dot(q, ntl.trans(key[j]), input_precision="ieee") * (
                scale * 1.4426950408889634
            )
            scores += ntl.cast(mask[g, j], ntl.float32) * 1.4426950408889634
            scores = ntl.where(
                key[j].offsets(-2)[None, :] < key.source.shape[-2], scores, float("-inf")
            )
            accumulator, running_max, running_sum = step(
                scores, value[j], accumulator, running_max, running_sum
            )
        output[g] = ntl.where(running_sum[:, None] == 0, 0.0, accumulator / running_sum[:, None])


def config(variant):
    switches = dict(variant.switches)
    if variant.dtype == "fp32":
        return Config({"block_size_m": 64, "block_size_n": 32}, num_warps=4, num_stages=1)
    small_shared = variant.arch in ("sm_86", "sm_89", "sm_120")
    if switches["head_dim"] == "128":
        block_m = 64 if small_shared else 128
        return Config({"block_size_m": block_m, "block_size_n": 64}, num_warps=8, num_stages=2)
    return Config({"block_size_m": 128, "block_size_n": 64}, num_warps=4, num_stages=3)


def premake(ndim, dtype, head_dim="64", mask="none", block_size_m=64, block_size_n=32):
    def attention_tensor(**options):
        return Tensor(4, dtype=dtype, shape=(None, None, None, int(head_dim)), **options)

    query, key, value = (attention_tensor(other=0) for _ in range(3))
    scale = Tensor(0, dtype=ninetoothed.float32)
    middle = {
        "none": (scale,),
        "causal": (scale, Tensor(0, dtype=ninetoothed.int64)),
        "bool": (Tensor(4, dtype="i1", other=0), scale),
        "float": (Tensor(4, dtype=dtype, other=0), scale),
    }[mask]
    application_ = {
        "none": application,
        "causal": application_causal,
        "bool": application_bool,
        "float": application_float,
    }[mask]
    arrange = functools.partial(
        arrangement, mask=mask, block_size_m=block_size_m, block_size_n=block_size_n
    )
    return arrange, application_, (query, key, value, *middle, attention_tensor())
