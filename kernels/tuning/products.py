"""Tuning policy of the matrix products (mm, bmm, addmm): the configurations of
`_lib/products.py`'s tile loop (`tiles`), the buckets of sizes a launcher tells apart and
the calls a tuning run times in each (`buckets`), each bucket's declared default per
arch (`config`) and what a tuning run tries (`candidates`). The winners a tuning run
found on a GPU are the tables beside this file (`sm_90.json`): they replace the
defaults, and must be among the candidates.
"""

from ntops_aot.aot.declare.space import Bucket, Config, Operand

# Hopper and Blackwell datacenter parts: 227 KiB of shared memory per block and TMA.
_BIG_SHARED = ("sm_90", "sm_100")
_TMA = ("sm_90", "sm_100", "sm_120")


def tiles(
    m, n, k, warps, stages, group=8, persistent=0, ws=False, flatten=False, tma=True, split=1,
    ctas=1,
):  # fmt: skip
    """A configuration: tile sizes, tile grouping, the Hopper choices (TMA loads,
    warp specialisation of the K loop, flattening persistent loops, programs of a
    cluster of `ctas` blocks), and up to how many parts K may be split into when the
    tiles alone leave multiprocessors idle."""
    premake = {
        "block_size_m": m,
        "block_size_n": n,
        "block_size_k": k,
        "group_size_m": group,
        "tma": tma,
        "warp_specialize": ws,
        "flatten": flatten,
    }
    return Config(premake, warps, stages, persistent=persistent, split=split, num_ctas=ctas)


def linear(m, k, n):
    """`x @ w.t()` with x (m, k) and w an nn.Linear weight (n, k)."""
    return (Operand((m, k)), Operand((k, n), transposed=True))


def row_major(m, k, n):
    return (Operand((m, k)), Operand((k, n)))


# The products of the models the tuning samples: Llama-3-8B (fused QKV 4096 -> 6144,
# the output projection 4096 -> 4096, fused gate/up 4096 -> 28672, down 14336 ->
# 4096), Qwen2.5-7B (hidden 3584, 28 query heads over 4, MLP 18944) and Llama-3.2-1B
# (hidden 2048, 32 over 8 heads of 64, MLP 8192), as (K, N).
LAYER = ((4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096))
QWEN_7B = ((3584, 4608), (3584, 3584), (3584, 37888), (18944, 3584))
LLAMA_1B = ((2048, 3072), (2048, 2048), (2048, 16384), (8192, 2048))
# And each one's MLP up projection unfused (stacks that keep gate and up apart).
UNFUSED = ((4096, 14336), (3584, 18944), (2048, 8192))
MODELS = LAYER + QWEN_7B + LLAMA_1B + UNFUSED
# Bucket bounds on M (rows): decoding batches of up to 16 and of up to 64 sequences are
# memory-bound (every tile of the weight read once, by enough programs to fill the
# GPU: narrow tiles, deep pipelines); 65-256 rows (a busy server's decode step) are
# near the H100's ridge, where how many tiles there are next to the 132
# multiprocessors decides; chunked prefill (257-512) and longer prefill are
# compute-bound (128x256 tiles, persistent programs, from 513 rows on).
BOUNDS = {
    "decode": 16,
    "small": 32,
    "batched": 64,
    "medium": 128,
    "large": 192,
    "larger": 256,
    "chunk": 512,
    "prefill": None,
}
SAMPLE_ROWS = {
    "decode": (1, 8, 16),
    "small": (24, 32),
    "batched": (48, 64),
    "medium": (96, 128),
    "large": (160, 192),
    "larger": (224, 256),
    "chunk": (384, 512),
    "prefill": (1024, 2048),
}
# The columns N (the second key) split the buckets too: how many tiles a product has
# next to the multiprocessors sets which tiles fill them. On an
# H100 (132 multiprocessors; device time, 2026-11-23, Triton JIT prototype): at N=4096
# 64x32 tiles (128 programs) reach 0.97-1.03x cuBLAS where 64x64 ones (64) reach
# 0.93-0.99x; at N=6144 and 28672 64x64 tiles reach 0.98-1.04x and 64x32 ones (1.5
# waves at 6144) 0.83-0.96x.
# Past 4096 columns, tiles that make 128 programs at 4096 make a second wave at 4608
# (Qwen2.5-7B's fused QKV): at decode 16x32 tiles reach 0.91x cuBLAS there and 16x64
# ones 0.98x, at 128 rows 64x64 tiles 0.58x (H100, 2026-11-26).
WIDE = {
    "decode": (4096,),
    "small": (4096,),
    "batched": (4096,),
    "medium": (4096,),
    # 129-256 rows (large and larger): 128x256 persistent tiles suit 14336 columns and
    # more, and leave 6144 (Llama's fused QKV) and 8192 (Llama-3.2-1B's MLP) at
    # 0.51-0.63x, where 128x128 tiles reach 0.68-0.79x (H100, 2026-11-26): a bucket of
    # their own.
    "large": (4096, 8192),
    "larger": (4096, 8192),
    "chunk": (4096,),
    "prefill": (4096,),
}
SUFFIXES = ("-mid", "-wide")


def base(bucket):
    """The bucket of rows a bucket belongs to (`large` of `large-mid`)."""
    for suffix in SUFFIXES:
        bucket = bucket.removesuffix(suffix)
    return bucket


def buckets(sample=linear, square=row_major):
    """Rows of the product pick the bucket, and where WIDE splits them its columns
    (`name` up to the first bound, `name-mid` up to the second, `name-wide` the rest).
    Samples: the models' products at each bucket's sizes, `sample(m, k, n)` making a
    call's operands, and 4096^3."""
    found = []
    for name, upto in BOUNDS.items():
        calls = [(n, sample(m, k, n)) for m in SAMPLE_ROWS[name] for k, n in MODELS]
        if name == "prefill":
            calls.append((4096, square(4096, 4096, 4096)))
        bounds = WIDE.get(name, ())
        names = [name, *(name + suffix for suffix in SUFFIXES[len(SUFFIXES) - len(bounds) :])]
        for label, low, high in zip(names, (0, *bounds), (*bounds, None), strict=True):
            taken = tuple(c for n, c in calls if n > low and (high is None or n <= high))
            found.append(Bucket(label, upto, taken, high))
    return tuple(found)


def config(variant, bucket):
    """The declared default of each bucket, per arch; tuning tables replace them."""
    arch, dtype = variant.arch, variant.dtype
    if dtype == "fp32":  # no TMA: fp32 tiles go through plain loads everywhere
        stages = 3 if arch in (*_BIG_SHARED, "sm_80") else 2
        return tiles(128, 128, 32, 8, stages, tma=False)
    tma, big = arch in _TMA, arch in _BIG_SHARED
    # Decode sizes load through plain pointers: on an H100 the TMA descriptors each
    # program makes cost 1-2 us, 5% of a 26 us product (tuning runs of 2026-11-22).
    if base(bucket) == "decode":
        return tiles(16, 32, 256 if big else 128, 4, 4, tma=False)
    if base(bucket) in ("small", "batched"):
        return tiles(64, 64, 128, 4, 4 if big else 3, tma=False)
    if base(bucket) in ("medium", "large", "larger"):
        return tiles(128, 128, 64, 8 if big else 4, 4 if big else 3, tma=tma)
    if big:
        return tiles(128, 256, 64, 8, 3, persistent=1, flatten=True, tma=tma)
    return tiles(128, 128, 32, 4, 3, tma=tma)


# Tried on sm_90 (H100, bf16/fp16). Decode sizes are memory-bound: how many programs
# share the weight's rows sets the speed (N=4096 in 64-wide tiles: 64 programs for 132
# multiprocessors), so narrow tiles, long K steps and split K are in the running, and
# plain loads next to TMA (no descriptors to make per program). Split K zeroed its
# counters with a memset, 2 us of a 16 us product, until `arrive` tagged them instead.
# From 17 rows on, deep pipelines of long K steps win. Measured on an H100 (device time,
# 2026-11-22) while N still came from the right operand (see the applications), so
# every ratio below was low by 5-15%: splitting K lost to every unsplit tile, stream K
# (equal shares of all tiles' K steps over 132 programs, 0.51-0.94x: partials and
# re-read activations load L2) lost, and so did tiles small enough for 2-4 programs per
# multiprocessor. cuBLAS's kernels there (nvjet, in ncu) are warp-specialised TMA
# kernels of 96-128 programs in clusters of 2-4, 15-16 stages of 64-wide K steps.
_PLAIN, _SPLIT = {"tma": False}, {"split": 4}
_PLAIN_SPLIT = {**_PLAIN, **_SPLIT}
# Up to 64 rows: 64x64 tiles read every weight row once; at N=4096 they leave half the
# multiprocessors idle, where 64x32 and 32x32 tiles fill them (re-reading the
# activations from L2) and lose at wider N. Split K gives wide tiles programs but pays
# for its merge: on an H100 (2026-11-22, device time) a split in 2 without the merge
# matched cuBLAS where the merge left it at 0.87-0.93x.
_NARROW = [
    (64, 64, 128, 4, 6, _PLAIN),
    (64, 64, 128, 4, 5, _PLAIN),
    (64, 64, 128, 4, 3, _PLAIN),
    (32, 32, 256, 4, 4, _PLAIN),
    (64, 32, 256, 4, 4, _PLAIN),
    (32, 64, 256, 4, 4, _PLAIN),
    (64, 64, 128, 4, 6),
    (64, 64, 128, 4, 6, {**_PLAIN, "split": 2}),
]
_CANDIDATES = {
    "decode": [
        (16, 64, 128, 4, 6, _PLAIN),
        (16, 64, 256, 4, 4, _PLAIN),
        (16, 128, 128, 4, 4, _PLAIN),
        (16, 32, 128, 4, 6, _PLAIN),
        (16, 64, 128, 4, 6),
        (16, 64, 256, 4, 4, _PLAIN_SPLIT),
        (16, 128, 256, 4, 3, _PLAIN_SPLIT),
    ],
    "small": _NARROW,
    "batched": _NARROW,
}
# 65-256 rows and chunks (257-512): near the H100's ridge, where how many tiles there
# are next to the 132 multiprocessors decides, and no one tile fits every shape: at 128
# rows 64 x 64 tiles in plain loads (2 x 64 programs at N=4096) reach 0.95-1.04x
# cuBLAS, and 0.58x at N=4608 (144 programs: a second wave); split K in wide plain
# tiles suits wide N. So the columns split these buckets too (WIDE). Stream K was
# tried there and dropped (H100, 2026-11-26, its own TMA or plain tiles of 64 x 64 to
# 256 x 128, every program an equal share of the tiles' K steps, the shares of a tile
# summed by its last program): 0.29-0.91x, below the best unsplit or split tile on
# every sample; 132 programs each streaming its own range of the weight drew 1.31 TB/s
# where 48 whole tiles drew 1.49 (ncu: a third of the stalls on the loads' barrier).
_CANDIDATES["medium"] = _CANDIDATES["large"] = _CANDIDATES["larger"] = [
    (64, 64, 128, 4, 6, _PLAIN),
    (64, 32, 256, 4, 4, _PLAIN),
    (64, 128, 128, 4, 4, _PLAIN),
    (128, 64, 128, 4, 4, _PLAIN),
    (128, 64, 64, 4, 4, _PLAIN),
    (128, 64, 128, 4, 4, _PLAIN_SPLIT),
    (128, 128, 128, 8, 3, _PLAIN_SPLIT),
    (128, 64, 128, 8, 4, _PLAIN_SPLIT),
    (128, 128, 64, 8, 4, _PLAIN_SPLIT),
    (128, 128, 64, 8, 4, _SPLIT),
    (128, 256, 64, 8, 3, {"persistent": 1}),
    # Tiles that won single cells of bench_ceiling.py's products (H100, 2026-11-26):
    # Qwen2.5-7B's up projection at 192 rows 0.87x cuBLAS in TMA tiles of 64 x 128 x 64
    # (0.65x in the bucket's winner then), 0.91-0.92x at 96-128 rows in warp-specialised
    # 128 x 256 ones (0.85-0.87x); 129-256 rows split at 192 (`larger`) so that the
    # 64-row tiles that suit 192 need not suit 256 too.
    (64, 128, 64, 4, 4),
    (64, 128, 64, 4, 6),
    (128, 128, 64, 4, 4, {"ws": True}),
    (128, 256, 64, 4, 3, {"ws": True}),
]
_CANDIDATES["chunk"] = [
    (128, 128, 64, 8, 4),
    (128, 256, 64, 8, 3),
    (128, 256, 64, 8, 3, {"persistent": 1}),
    (128, 128, 64, 8, 4, {"persistent": 1}),
    (128, 128, 64, 8, 4, _SPLIT),
    (128, 128, 128, 8, 3, _PLAIN_SPLIT),
    (128, 64, 128, 4, 4, _PLAIN_SPLIT),
    (128, 64, 128, 4, 4, _PLAIN),
    (64, 128, 128, 4, 4, _PLAIN),
]


def candidates(variant, bucket):
    """What a tuning run tries (the default first). Half types on the arches with TMA;
    fp32 and the other arches keep their defaults."""
    default = config(variant, bucket)
    if variant.dtype == "fp32" or variant.arch not in _BIG_SHARED:
        return [default]
    if base(bucket) == "prefill":
        found = [
            tiles(128, 256, 64, 8, 3, group=4, persistent=1, flatten=True),
            tiles(128, 256, 64, 8, 3, group=16, persistent=1, flatten=True),
            tiles(128, 256, 64, 8, 3, persistent=1),
            tiles(128, 256, 64, 4, 3, persistent=1, ws=True),
            tiles(128, 256, 64, 8, 3, persistent=1, flatten=True, ctas=2),
            # Narrow products of 2048 rows (Qwen's 3584 -> 4608: 288 tiles of 128 x 256,
            # two waves and a fifth) in narrower tiles: none won (H100, 2026-11-26).
            tiles(128, 128, 64, 8, 4),
            tiles(128, 128, 64, 8, 4, persistent=1),
            tiles(128, 256, 64, 8, 3),
        ]
    else:
        found = [
            tiles(*choice[:5], **(choice[5] if len(choice) > 5 else {}))
            for choice in _CANDIDATES[base(bucket)]
        ]
    return [default, *(c for c in found if c.key != default.key)]


def unflattened(configs):
    """The configurations with persistent loops left unflattened, duplicates dropped:
    addmm's bias epilogue needs the shared memory that flattening 128x256 tiles
    across tiles would take (245784 bytes on sm_90, over its 232448)."""
    found = {}
    for config in configs:
        config = Config(
            {**config.premake, "flatten": False},
            config.num_warps,
            config.num_stages,
            persistent=config.persistent,
            split=config.split,
            num_ctas=config.num_ctas,
        )
        found.setdefault(config.key, config)
    return list(found.values())
