"""Tuning policy of attention (scaled_dot_product_attention): the configurations of
`_lib/attention.py`'s kernel (`tiles`), the buckets a launcher tells apart by the
number of queries and the cache's length, with the calls a tuning run times in each
(`BUCKETS`), each bucket's declared default per arch (`config`) and what a tuning run
tries (`candidates`). Up to 16 queries (decode) the keys are split into parts (flash
decoding); longer calls (prefill) run flash attention 2 unsplit. The winners a tuning
run found are the tables beside this file.
"""

import triton

from ntops_aot.aot.declare.space import Bucket, Config, Operand

# Llama-3-8B's attention (32 query heads over 8 key/value heads), Qwen2.5-7B's (28
# over 4: groups of 7, and half Llama's key/value heads to spread over the
# multiprocessors) and plain multi-head attention, at decode (one query against a KV
# cache) and prefill sizes.
_GQA, _QWEN, _MHA = (32, 8), (28, 4), (32, 32)


def _sample(batch, heads, seq_q, seq_kv, head_dim=128):
    heads_q, heads_kv = heads
    return (
        Operand((batch, heads_q, seq_q, head_dim)),
        Operand((batch, heads_kv, seq_kv, head_dim)),
        Operand((batch, heads_kv, seq_kv, head_dim)),
    )


# Decode splits by the cache's length too: up to 2048 keys a batch-1 step is a few
# microseconds, where how finely the keys split sets the time.
SHORT_CACHE = 2048


def _decode(batches, lengths):
    return tuple(
        _sample(batch, heads, 1, seq_kv)
        for batch in batches
        for seq_kv in lengths
        for heads in (_GQA, _QWEN, _MHA)
    )


BUCKETS = (
    Bucket("decode", 16, _decode((1, 8, 32), (1024, 2048)), SHORT_CACHE),
    Bucket("decode-long", 16, _decode((1, 8), (4096, 32768)) + _decode((32,), (4096,))),
    Bucket("prefill", None, (_sample(1, _GQA, 2048, 2048), _sample(4, _MHA, 4096, 4096))),
)


def config(variant, bucket):
    """The declared default of each bucket, per arch; tuning tables replace them.
    head_dim 256 takes narrower key blocks: 64 keys of 256 dims are 32 KiB in half
    types, per operand and stage."""
    head_dim = int(dict(variant.switches)["head_dim"])
    block_d = triton.next_power_of_2(head_dim)
    wide = block_d > 128
    small_shared = variant.arch in ("sm_86", "sm_89", "sm_120")
    if bucket.startswith("decode"):
        if variant.arch == "sm_90" and variant.dtype != "fp32" and not wide:
            # H100 tuning runs (2026-11-23, bf16, head_dim 128, batch 1-32, GQA and MHA):
            # 64 keys a block in up to 16 parts led both buckets by 1-3%. With the merge
            # in one round of loads, 1.04-1.12x torch at batch 1, 0.98-1.09x at 8 and 32
            # (0.98-1.00 over 134 MB of keys and more: bandwidth-bound); TMA loads 1-5% slower.
            # Up to 32 parts (H100, 2026-11-26, against torch in one run): Qwen2.5-7B's 28
            # heads over 4 at batch 1 are 4 tiles, 64 programs at 16 parts, 128 at 32;
            # over 32768 keys 34.4-34.9 -> 31.2-31.4 us, 0.94x -> 1.03x torch; Llama-3-8B's
            # 32 over 8 at batch 64 over 4096 keys 376-377 -> 353 us (0.94x -> 1.00x);
            # the other cases within 2%.
            return tiles(16, 64, block_d, 4, 3, split=32)
        # Two stages where a block gets 99 KiB: three of fp32 keys and values in 64-key
        # blocks of 128 dims took 143 KiB.
        block_n = 16 if wide and variant.dtype == "fp32" else 32 if wide else 64
        return tiles(16, block_n, block_d, 4, 2 if small_shared else 3, split=16)
    if variant.dtype == "fp32":
        # IEEE fp32 products are FMA loops unrolled over the tile: 64x32 tiles made
        # the fp32 variants a sixth of an sm_90 build (34 s each for head_dim 128,
        # 19 s in 32x32).
        return tiles(32, 16 if wide else 32, block_d, 4, 1 if small_shared else 2)
    if wide:
        return tiles(64, 32, block_d, 8, 1 if small_shared else 2)
    if variant.arch == "sm_90":
        # H100 tuning run (2026-11-23, bf16/fp16, head_dim 128, 2048 tokens of 32 heads
        # over 8 and 4x4096 of 32 over 32, Triton 3.9): 64x64 tiles in 4 warps with
        # TMA loads of keys and values reached 0.79-0.82x torch causal and 0.73-0.77x
        # not; 128x128 in 8 warps 0.70-0.76x; 64x64 without TMA 0.66-0.71x. The query's
        # block kept in registers (its product then reads only the keys from shared
        # memory) took 30-40 more registers and lost 4-7%.
        # The aligned specialisation of head_dim 64 and 128 (96 in 128's tiles) takes
        # the Gluon kernel instead (kernels/scaled_dot_product_attention.py's `plain`):
        # 0.89-1.02x torch causal, 0.85-0.91x not, where every Triton tile above stops
        # at 0.69-0.84x (H100, 2026-11-26, tests/benchmarks/bench_ceiling.py). The
        # tile stays the other specialisations'.
        return tiles(64, 64, block_d, 4, 3, tma=True, gluon=block_d in (64, 128))
    block_m = 64 if small_shared and head_dim > 64 else 128
    warps = 8 if head_dim > 64 else 4
    return tiles(block_m, 64, block_d, warps, 2 if small_shared else 3)


def tiles(m, n, d, warps, stages, split=1, tma=False, gluon=False):
    """A configuration: blocks of m rows (queries of a group's heads) and n keys of d
    dims, TMA loads of the keys and values or plain ones, and up to `split` parts of
    the keys (decode); `gluon`: the Gluon prefill kernel where it applies."""
    premake = {"block_size_m": m, "block_size_n": n, "block_size_d": d, "tma": tma}
    if gluon:
        premake["gluon"] = True
    return Config(premake, num_warps=warps, num_stages=stages, split=split)


def candidates(variant, bucket):
    """What a tuning run tries (the default first): half types on Hopper at head_dim 128
    (the samples'), causal kernels (the tuner times unmasked calls, which run them)."""
    default = config(variant, bucket)
    switches = dict(variant.switches)
    mask, block_d = switches["mask"], default.premake["block_size_d"]
    if (
        variant.dtype == "fp32"
        or variant.arch != "sm_90"
        or switches["head_dim"] != "128"
        or mask != "causal"
    ):
        return [default]
    if bucket != "prefill":
        # Batch 1 of Qwen's 4 key/value heads fills 132 multiprocessors only in 32
        # parts or more.
        found = [
            tiles(16, 64, block_d, 4, 3, 64),
            tiles(16, 128, block_d, 4, 3, 32),
            tiles(16, 128, block_d, 4, 3, 16),
            tiles(16, 64, block_d, 4, 3, 32),
            tiles(16, 128, block_d, 8, 3, 32),
            tiles(16, 64, block_d, 4, 4, 16),
            tiles(16, 64, block_d, 4, 3, 16),
            tiles(16, 32, block_d, 4, 4, 32),
        ]
    else:
        # Warp-specialised loops fail to compile in Triton 3.9 here (its
        # NVGPUWarpSpecialization pass), as in batched matrix products.
        found = [
            tiles(128, 128, block_d, 8, 3, tma=True),
            tiles(128, 64, block_d, 8, 3, tma=True),
            tiles(64, 128, block_d, 4, 3, tma=True),
            tiles(64, 64, block_d, 4, 2, tma=True),
            tiles(64, 64, block_d, 4, 4, tma=True),
            tiles(64, 32, block_d, 4, 3, tma=True),
            # Triton 3.7 on moved the best warps and key blocks (triton-lang/triton#11373).
            tiles(128, 64, block_d, 4, 3, tma=True),
            tiles(128, 128, block_d, 8, 2, tma=True),
            tiles(64, 128, block_d, 4, 2, tma=True),
        ]
    return [default, *(c for c in found if c.key != default.key)]
