"""Paged attention against FlashInfer, side by side in one process: ntops_prebuilt's
flash_attn_with_kvcache (decode) and flash_attn_varlen_func (ragged prefill, mixed
batches) against FlashInfer's BatchDecodeWithPagedKVCacheWrapper and
BatchPrefillWithPagedKVCacheWrapper on the same paged cache (Llama-3-8B's attention:
32 query heads over 8 key/value heads, head_dim 128, bf16).

With --kv fp8 the cache is float8_e4m3fn with a scale per tensor (ntops_prebuilt's
paged_attention_fp8 with k_descale and v_descale; FlashInfer's kv_data_type float8_e4m3fn
with k_scale and v_scale), and each row also times ntops_prebuilt over the same cache in
bf16 (`ours_bf16_us`).

Both are checked against each other before anything is timed. GPU us: CUDA graphs of
one call each, replayed back to back between CUDA events (FlashInfer planned outside
the graph, as engines run it); median of repeats, the two taking turns. Eager us: wall
time per step of back-to-back calls (FlashInfer's plan, which engines run every step,
included). GB/s: the keys and values a step reads over its GPU time.

    python tests/benchmarks/bench_paged_attention.py [--kv fp8] --json OUT.json
"""

import argparse
import json
import statistics
import time

import torch

import ntops_prebuilt as nt

HEADS_Q, HEADS_KV, HEAD_DIM, DTYPE = 32, 8, 128, torch.bfloat16
# The cache's dtype (--kv) and an FP8 cache's scale per tensor (values about 0.05 * 448).
KV = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
FP8_SCALE = 0.05


def lengths_of(kind, batch, generator):
    if kind == "uniform":
        return torch.randint(128, 8193, (batch,), generator=generator).tolist()
    # skewed: one long request among short ones
    return [32768, *torch.randint(64, 513, (batch - 1,), generator=generator).tolist()]


def paged(lengths, page, generator, kv=DTYPE):
    """A shuffled paged cache holding `lengths` keys per request; (k, v, table, flashinfer's
    indptr, indices, last page lengths)."""
    needed = [-(-n // page) for n in lengths]
    total = sum(needed)
    order = torch.randperm(total, generator=generator).to(torch.int32)
    shape = (total, page, HEADS_KV, HEAD_DIM)
    k, v = (torch.randn(shape, device="cuda", dtype=DTYPE) for _ in "kv")
    if kv != DTYPE:
        k, v = ((t / FP8_SCALE).to(kv) for t in (k, v))
    table = torch.zeros(len(lengths), max(needed), dtype=torch.int32)
    indptr = [0]
    for b, count in enumerate(needed):
        table[b, :count] = order[indptr[-1] : indptr[-1] + count]
        indptr.append(indptr[-1] + count)
    last = [n - (c - 1) * page for n, c in zip(lengths, needed, strict=True)]
    cuda = {"dtype": torch.int32, "device": "cuda"}
    return (
        k, v, table.cuda(), torch.tensor(indptr, **cuda), order.cuda(), torch.tensor(last, **cuda)
    )  # fmt: skip


def graph_us(fn, repeats=7, calls=20):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def eager_us(fn, repeats=5, calls=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - begin) * 1e6 / calls)
    return statistics.median(times)


def scales(kv):
    """(ours, FlashInfer's) keyword arguments for a cache of dtype `kv`."""
    if kv == DTYPE:
        return {}, {}
    scale = torch.tensor([FP8_SCALE], device="cuda")
    return {"k_descale": scale, "v_descale": scale}, {"k_scale": FP8_SCALE, "v_scale": FP8_SCALE}


def as_half(k, v):
    """An FP8 cache's values in bf16 (the same cache unquantized), for ours_bf16_us."""
    return tuple((t.float() * FP8_SCALE).to(DTYPE) for t in (k, v))


def decode(flashinfer, workspace, batch, page, kind, generator, kv=DTYPE):
    lengths = lengths_of(kind, batch, generator)
    k, v, table, indptr, indices, last = paged(lengths, page, generator, kv)
    descale, scale = scales(kv)
    q = torch.randn(batch, 1, HEADS_Q, HEAD_DIM, dtype=DTYPE, device="cuda")
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True,
        paged_kv_indptr_buffer=indptr, paged_kv_indices_buffer=indices,
        paged_kv_last_page_len_buffer=last,
    )  # fmt: skip

    def plan():
        wrapper.plan(
            indptr, indices, last, HEADS_Q, HEADS_KV, HEAD_DIM, page,
            q_data_type=DTYPE, kv_data_type=kv,
        )  # fmt: skip

    def theirs():
        return wrapper.run(q[:, 0], (k, v), **scale)

    def ours():
        return nt.flash_attn_with_kvcache(
            q, k, v, cache_seqlens=seqlens, block_table=table, **descale
        )

    plan()
    torch.testing.assert_close(ours()[:, 0], theirs(), rtol=2e-2, atol=2e-2)
    bytes_read = 2 * sum(lengths) * HEADS_KV * HEAD_DIM * k.element_size()
    row = run_pair(ours, theirs, plan, bytes_read)
    if kv != DTYPE:
        k16, v16 = as_half(k, v)
        row["ours_bf16_us"] = round(
            graph_us(lambda: nt.flash_attn_with_kvcache(q, k16, v16, cache_seqlens=seqlens,
                                                        block_table=table)), 1
        )  # fmt: skip
    return row


def prefill(flashinfer, workspace, q_lens, k_lens, page, generator, kv=DTYPE):
    k, v, table, indptr, indices, last = paged(k_lens, page, generator, kv)
    descale, scale = scales(kv)
    q = torch.randn(sum(q_lens), HEADS_Q, HEAD_DIM, dtype=DTYPE, device="cuda")
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    cu_q = cu_q.cuda()
    seqused = torch.tensor(k_lens, dtype=torch.int32, device="cuda")
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")

    def plan():
        wrapper.plan(
            cu_q, indptr, indices, last, HEADS_Q, HEADS_KV, HEAD_DIM, page, causal=True,
            q_data_type=DTYPE, kv_data_type=kv,
        )  # fmt: skip

    def theirs():
        return wrapper.run(q, (k, v), **scale)

    def ours(k=k, v=v, descale=descale):
        return nt.flash_attn_varlen_func(
            q, k, v, cu_q, None, max(q_lens), max(k_lens), causal=True, block_table=table,
            seqused_k=seqused, **descale,
        )  # fmt: skip

    plan()
    torch.testing.assert_close(ours(), theirs(), rtol=2e-2, atol=2e-2)
    bytes_read = 2 * sum(k_lens) * HEADS_KV * HEAD_DIM * k.element_size()
    row = run_pair(ours, theirs, plan, bytes_read)
    if kv != DTYPE:
        k16, v16 = as_half(k, v)
        row["ours_bf16_us"] = round(graph_us(lambda: ours(k16, v16, {})), 1)
    return row


def run_pair(ours, theirs, plan, bytes_read):
    figures = {"ours": [], "flashinfer": []}
    for _ in range(3):  # taking turns
        figures["ours"].append(graph_us(ours))
        figures["flashinfer"].append(graph_us(theirs))
    ours_us, theirs_us = (statistics.median(figures[name]) for name in ("ours", "flashinfer"))

    def planned_step():
        plan()
        theirs()

    return {
        "ours_us": round(ours_us, 1),
        "flashinfer_us": round(theirs_us, 1),
        "ratio": round(theirs_us / ours_us, 3),
        "ours_GBps": round(bytes_read / ours_us / 1e3, 1),
        "flashinfer_GBps": round(bytes_read / theirs_us / 1e3, 1),
        "ours_eager_us": round(eager_us(ours), 1),
        "flashinfer_eager_us": round(eager_us(planned_step), 1),
    }


def guarded(case, *args):
    """A row, or what refused it (FlashInfer builds some dtypes' kernels only on
    request): the error is the row's figure."""
    try:
        return case(*args)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error)[:300]}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--quick", action="store_true", help="batches 1 and 64 only")
    parser.add_argument(
        "--pages", default="16,64", help="page sizes, comma-separated (default: 16,64)"
    )
    parser.add_argument("--kv", choices=sorted(KV), default="bf16", help="the cache's dtype")
    args = parser.parse_args()
    kv = KV[args.kv]
    pages = [int(page) for page in args.pages.split(",")]
    import flashinfer

    workspace = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    generator = torch.Generator().manual_seed(0)
    rows = {}
    batches = (1, 64) if args.quick else (1, 8, 64, 256)
    for page in pages:
        for kind in ("uniform", "skewed"):
            for batch in batches:
                name = f"decode page{page} {kind} b{batch}"
                rows[name] = guarded(
                    decode, flashinfer, workspace, batch, page, kind, generator, kv
                )
                print(name, rows[name], flush=True)
    k_lens = torch.randint(128, 4097, (8,), generator=generator).tolist()
    for page in pages:
        name = f"prefill 8 ragged causal page{page}"
        rows[name] = guarded(prefill, flashinfer, workspace, k_lens, k_lens, page, generator, kv)
        print(name, rows[name], flush=True)
        q_lens = [512] + [1] * 63
        mixed_k = [1024, *torch.randint(128, 8193, (63,), generator=generator).tolist()]
        name = f"mixed 512+63 page{page}"
        rows[name] = guarded(prefill, flashinfer, workspace, q_lens, mixed_k, page, generator, kv)
        print(name, rows[name], flush=True)
    device = torch.cuda.get_device_name()
    result = {
        "device": device, "flashinfer": flashinfer.__version__, "kv": args.kv, "rows": rows,
    }  # fmt: skip
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
