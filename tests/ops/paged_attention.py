"""paged_attention (flash_attn_varlen_func, flash_attn_with_kvcache): the same math on
dense tensors (`reference`, vectorised so that it runs on fake tensors too), a call per
kernel of a variant in its specialisation's layout (`run`), the calls the fake-tensor
check and opcheck make (`calls`), and the fuzz's random calls (`fuzz_spec`)."""

import functools
import importlib.util
import pathlib

import torch

from tests.calls import Call
from tests.gpu.layouts import size_in, strided, values

# plan, output, query, key, value, key_new, value_new, cu_seqlens_q, k_starts, k_lens,
# block_table, lse
TENSORS = 12


def reference(*args, **kwargs):
    """The op's declared reference (ntops_prebuilt._paged_reference): the installed wheel's
    where there is one (the GPU suites), else the source tree's (the CPU suites)."""
    try:
        from ntops_prebuilt._paged_reference import reference as dense
    except ImportError:  # the file itself: importing the runtime package loads its _C
        dense = _source_reference()
    return dense(*args, **kwargs)


@functools.cache
def _source_reference():
    path = pathlib.Path(__file__).parents[2] / "aot" / "runtime" / "_paged_reference.py"
    spec = importlib.util.spec_from_file_location("_paged_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference


def num_tensors(variant):
    return TENSORS


def run(nt, variant, spec, dtype, bucket):
    """A paged call of the bucket's queries per request (decode: 3; prefill: 37 beside a
    decoding request) over a shuffled paged cache, its new entries appended; the wide
    kernel's: two queries 2^31 elements apart."""
    head_dim = int(variant["switches"]["head_dim"])
    heads_q, heads_kv, page = 8, 2, 16
    q_len = size_in(bucket[0], 3 if bucket[0][1] <= 8 else 37)
    q_lens = [q_len, 1]
    if spec.width == 64:
        q_lens = [1, 1]
    total = sum(q_lens)
    query = strided(
        (total, heads_q, head_dim), dtype, unit=2, aligned=spec.aligned,
        wide=spec.width == 64,
    )  # fmt: skip
    cache = [values((12, page, heads_kv, head_dim), dtype) for _ in "kv"]
    table = torch.randperm(12, dtype=torch.int32, device="cuda").view(2, 6)
    lengths = torch.tensor([70, 33], dtype=torch.int32, device="cuda")
    cu_q = torch.tensor([0, q_lens[0], total], dtype=torch.int32, device="cuda")
    expected = reference(
        query, *(c.clone() for c in cache), cu_q, lengths, None, table,
        max_seqlen_q=max(q_lens), causal=True,
    )[0]  # fmt: skip
    result, _ = nt.paged_attention(
        query, *cache, cu_q, lengths, None, table, max_seqlen_q=max(q_lens), causal=True
    )
    return result, expected


def calls(name, dtype):
    """A paged decode step appending one entry per request, and ragged packed queries
    and keys under a causal sliding window with softcapping."""

    def decode(make):
        query = make((2, 1, 8, 64), dtype)
        caches = [make((6, 16, 2, 64), dtype) for _ in "kv"]
        new = [make((2, 1, 2, 64), dtype) for _ in "kv"]
        device = query.device
        table = torch.arange(6, dtype=torch.int32, device=device).view(2, 3)
        lengths = torch.full((2,), 20, dtype=torch.int32, device=device)
        return (query, *caches), {
            "seqused_k": lengths, "block_table": table, "key_new": new[0], "value_new": new[1],
            "causal": True,
        }  # fmt: skip

    def ragged(make):
        query = make((9, 4, 128), dtype)
        key, value = (make((40, 2, 128), dtype) for _ in "kv")
        device = query.device
        cu_q = torch.arange(4, dtype=torch.int32, device=device) * 3
        cu_k = torch.arange(4, dtype=torch.int32, device=device) * 13
        return (query, key, value, cu_q), {
            "cu_seqlens_k": cu_k, "max_seqlen_q": 3, "causal": True, "window_left": 5,
            "softcap": 20.0,
        }  # fmt: skip

    return [
        Call(f"{name} paged decode appending", name, decode, reference),
        Call(f"{name} ragged packed", name, ragged, reference),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, reference, (torch.float16, torch.bfloat16), atol=_atol)


def _draw(d, op):
    """A random ragged batch over a paged, packed or dense cache; lengths and tables
    contiguous int32 (as FlashAttention requires them)."""
    dtype = d.principal((torch.float16, torch.bfloat16))
    batch, heads_kv, group = d.rng.randint(1, 4), d.pick((1, 2, 4)), d.pick((1, 2, 4, 8))
    head_dim = d.pick((64, 128, 96, 256))
    q_lens = [d.pick((1, 1, 2, 5, 17, 40)) for _ in range(batch)]
    k_lens = [n + d.rng.randint(0, 90) for n in q_lens]
    layout = d.pick(("paged", "packed", "dense"))

    def tensor(shape):  # mostly contiguous: a strided head_dim is refused (as FlashAttention)
        layout = d.pick(("plain", "plain", "plain", "any"))
        return d.tensor(shape, dtype, layout=layout, specials=None, scale=1.0)

    def int32(values):
        values = torch.tensor(values, dtype=torch.int32)
        return d.tensor(values.shape, torch.int32, layout="plain", exotic=False, values=values)

    def offsets(lengths):
        return int32([0, *torch.tensor(lengths).cumsum(0).tolist()])

    query = tensor((sum(q_lens), heads_kv * group, head_dim))
    kwargs = {"max_seqlen_q": max(q_lens), "causal": d.chance(0.6)}
    if layout == "packed":
        keys = (sum(k_lens), heads_kv, head_dim)
        args = [query, tensor(keys), tensor(keys), offsets(q_lens)]
        kwargs["cu_seqlens_k"] = offsets(k_lens)
    else:
        page = d.pick((1, 16, 17, 64)) if layout == "paged" else max(k_lens) + 8
        width = -(-(max(k_lens) + 8) // page)
        blocks = batch * width if layout == "paged" else batch
        shape = (blocks, page, heads_kv, head_dim)
        args = [query, tensor(shape), tensor(shape), offsets(q_lens)]
        kwargs["seqused_k"] = int32(k_lens)
        if layout == "paged":
            order = torch.randperm(blocks, generator=d.generator)
            kwargs["block_table"] = int32(order.view(batch, width).tolist())
    if d.chance(0.2):
        kwargs["window_left"] = d.rng.randint(0, 30)
    if d.chance(0.2):
        kwargs["softcap"] = d.pick((5.0, 30.0))
    return tuple(args), kwargs


def _atol(args, kwargs, precision):
    largest = args[2].abs().double().amax()
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(args[0].dtype, 1e-4) * largest
