"""scaled_dot_product_attention: softmax(query key^T * scale + mask) value, computed a
block of keys at a time with a running maximum and sum (flash attention), in fp32.

The kernel (blocks of the rows of a GQA group's queries; keys split into parts up to 16
queries) is _lib/attention.py's, its configurations and their buckets
tuning/attention.py's. Head dims 32, 64, 96, 128 and 256.

`mask` is one switch: causal (with an offset: 0 for the upper-left variant,
seq_kv - seq_q for lower-right), or a bool or float tensor broadcast to
(batch, heads_q, seq_q, seq_kv). Rows with every key masked give 0. A call without a
mask runs the causal kernel with the diagonal past the last key (offset seq_kv): every
block of keys lies below it, so it takes the unmasked loop an unmasked kernel would
(the same time, measured side by side), and a build compiles a quarter fewer attention
kernels. Products are
IEEE ("ieee" input precision), as torch's fp32 attention computes them: fp32 inputs
never go through TF32; for fp16 and bf16 the precision changes nothing.
"""

import functools

import ninetoothed
from ninetoothed import Tensor

from ntops_aot.aot.declare.api import Api, sample
from ntops_aot.aot.declare.plain import Plain
from ntops_aot.aot.declare.space import FLOATS, Tuning, VariantSpace

from ._lib import attention, gluon_attention

# ninetoothed copies into a kernel the Triton functions of its application's module:
# `attend` and every function it calls are imported by name.
from ._lib.attention import attend, fold, merge  # noqa: F401
from ._lib.parts import arrive, claim, leave_rows, merged_rows, partial_results  # noqa: F401
from .tuning import attention as tuning

# The masks, with the kind `attend` reads (0, no mask, is causal past the last key).
MASKS = {"causal": 1, "bool": 2, "float": 3}
SPACE = VariantSpace(
    dtypes=FLOATS,
    ndims=(4,),
    switches={"head_dim": ("32", "64", "96", "128", "256"), "mask": tuple(MASKS)},
    coalesce="none",
    unspecialized=("mask",),
    # The 32-bit generic kernel stays, though it costs a quarter of attention's build
    # time: the 64-bit one in its place measured 1.17x (causal 1.5x) slower at prefill on
    # misaligned or strided queries (H100, 2026-11-26, tests/benchmarks/bench_build_cuts.py).
    specs=("aligned", "generic", "wide"),
    in_place=False,
    workspace="workspace",
    launch_id="launch",
    # Aligned half-type calls load them by TMA (_lib/attention.py, _lib/gluon_attention.py).
    descriptors=("query", "key", "value"),
    # What the launcher checks: the kernels are built for one head_dim; the output is
    # (batch, heads_kv, group * seq_q, head_dim), the query heads that share a key/value
    # head one after another; the mask is broadcast to (batch, heads_q, seq_q, seq_kv);
    # the new cache entries (or the caches themselves) have the caches' heads.
    dims={
        "output": ("batch", "heads_kv", "heads_q/heads_kv*seq_q", "head_dim={head_dim}"),
        "query": ("batch", "heads_q", "seq_q", "head_dim={head_dim}"),
        "key": ("batch", "heads_kv", "seq_kv", "head_dim={head_dim}"),
        "value": ("batch", "heads_kv", "seq_kv", "head_dim={head_dim}"),
        "present_key": ("batch", "heads_kv", None, "head_dim={head_dim}"),
        "present_value": ("batch", "heads_kv", None, "head_dim={head_dim}"),
        "mask": ("batch", "heads_q", "seq_q", "seq_kv"),
    },
)

API = Api(
    "(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0,"
    " bool is_causal=False, float? scale=None, bool enable_gqa=False, int? causal_variant=None,"
    " Tensor? present_key=None, Tensor? present_value=None, Tensor? present_key_slot=None,"
    " Tensor? present_value_slot=None)",
    "torch.nn.functional.scaled_dot_product_attention",
    wrapper="_attention",
    # A KV cache's new entries, written into their slots before the attention (a traced
    # call writes them as copies a graph can order; the kernel writes a decode step's).
    written={"present_key_slot": "present_key", "present_value_slot": "present_value"},
    # torch's half-type attention rounds P to half before P @ V, as the kernel does,
    # but in another order; fp32 over up to 32768 keys sums in another order too: as
    # the GPU suite has always allowed.
    tolerance={"fp16": (1e-2, 1e-2), "bf16": (1.6e-2, 1e-2), "fp32": (1e-4, 1e-4)},
    samples=(
        sample(query=(2, 8, 37, 64), key=(2, 8, 37, 64), value=(2, 8, 37, 64)),
        sample(query=(2, 8, 37, 128), key=(2, 8, 37, 128), value=(2, 8, 37, 128), is_causal=True),
        sample(
            query=(1, 32, 1, 128), key=(1, 8, 300, 128), value=(1, 8, 300, 128), enable_gqa=True
        ),
    ),
)

TUNING = Tuning(
    function="scaled_dot_product_attention",
    reference="nn.functional.scaled_dot_product_attention",
    key=("query", -2),
    key2=("key", -2),
    buckets=tuning.BUCKETS,
    specs=("i32-u333333-a16", "i32-u333333x-a16"),
    # The tuner times unmasked calls: they run the causal kernel (past the last key).
    options={"enable_gqa": True},
)
config = tuning.config
candidates = tuning.candidates
workspace = attention.workspace
arrangement = attention.arrangement


# `attend` over the source tensors (attention.attend_tensors, inlined by ninetoothed): a
# causal offset, or a mask tensor's pointer and strides.
def application(
    output, query, key, value, present_key, present_value, appended, scale, offset,
    workspace, launch, block_m, block_n, block_d, kind, split, precision, tma,
):  # fmt: skip
    attention.attend_tensors(
        output, query, key, value, present_key, present_value, appended,
        output.source.data_ptr(), 0, 0, 0, 0, scale, offset, workspace, launch,
        block_m, block_n, block_d, kind, split, precision, tma,
    )  # fmt: skip


def application_masked(
    output, query, key, value, present_key, present_value, appended, mask, scale, workspace,
    launch, block_m, block_n, block_d, kind, split, precision, tma,
):  # fmt: skip
    """A bool or float mask tensor (`kind` 2 or 3), broadcast by its strides."""
    attention.attend_tensors(
        output, query, key, value, present_key, present_value, appended,
        mask.source.data_ptr(), mask.source.stride(0), mask.source.stride(1),
        mask.source.stride(2), mask.source.stride(3), scale, 0, workspace, launch,
        block_m, block_n, block_d, kind, split, precision, tma,
    )  # fmt: skip


APPLICATIONS = {
    "causal": application,
    "bool": application_masked,
    "float": application_masked,
}


def premake(
    ndim, dtype, head_dim="64", mask="causal", block_size_m=64, block_size_n=64,
    block_size_d=64, split=1, tma=False, gluon=False, spec=None,
):  # fmt: skip
    def attention_tensor(**options):
        return Tensor(4, dtype=dtype, shape=(None, None, None, int(head_dim)), **options)

    output, query, key, value, present_key, present_value = (attention_tensor() for _ in range(6))
    scale = Tensor(0, dtype=ninetoothed.float32)
    middle = {
        "causal": (scale, Tensor(0, dtype=ninetoothed.int32)),
        "bool": (Tensor(4, dtype="i1"), scale),
        "float": (Tensor(4, dtype=dtype), scale),
    }[mask]
    workspace, launch = Tensor(1, dtype=ninetoothed.int32), Tensor(0, dtype=ninetoothed.int64)
    blocks = (block_size_m, block_size_n, block_size_d)
    fixed = attention.constants(dtype, spec, blocks, MASKS[mask], split, tma)
    arrange = functools.partial(arrangement, block_size_m=block_size_m)
    appended = Tensor(0, dtype=ninetoothed.int32)
    present = (present_key, present_value, appended)
    tensors = (output, query, key, value, *present, *middle, workspace, launch, *fixed)
    return arrange, APPLICATIONS[mask], tensors


def plain(variant, config, spec):
    """Prefill of half types on Hopper, causal or unmasked, in the aligned specialisation
    (16-byte aligned rows, unit-stride head_dim: TMA's needs) of 32-bit sizes: the Gluon
    kernel (_lib/gluon_attention.py), 128 queries of a head a program, keys in blocks of
    128 through two stages. The other specialisations keep the generated kernel."""
    if not config.premake.get("gluon") or variant.arch != "sm_90":
        return None
    if dict(variant.switches)["mask"] != "causal" or config.num_warps != 4:
        return None
    if not (spec.aligned and spec.width == 32 and spec.unit and set(spec.unit) == {3}):
        return None
    rows = gluon_attention.ROWS.value
    grid = f"((query_size_2 + {rows - 1}) // {rows}) * query_size_0 * query_size_1"
    return Plain(gluon_attention.attention_prefill, grid, {"BLOCK_N": 128, "STAGES": 2})
