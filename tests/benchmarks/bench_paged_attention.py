"""Paged attention against FlashInfer, side by side in one process: ntops_prebuilt's
flash_attn_with_kvcache (decode) and flash_attn_varlen_func (ragged prefill, mixed
batches) against FlashInfer's BatchDecodeWithPagedKVCacheWrapper and
BatchPrefillWithPagedKVCacheWrapper on the same paged cache (Llama-3-8B's attention:
32 query heads over 8 key/value heads, head_dim 128, bf16).

Both are checked against each other before anything is timed. GPU us: CUDA graphs of
one call each, replayed back to back between CUDA events (FlashInfer planned outside
the graph, as engines run it); median of repeats, the two taking turns. Eager us: wall
time per step of back-to-back calls (FlashInfer's plan, which engines run every step,
included). GB/s: the keys and values a step reads over its GPU time.

    python tests/benchmarks/bench_paged_attention.py --json OUT.json
"""

import argparse
import json
import statistics
import time

import torch

import ntops_prebuilt as nt

HEADS_Q, HEADS_KV, HEAD_DIM, DTYPE = 32, 8, 128, torch.bfloat16


def lengths_of(kind, batch, generator):
    if kind == "uniform":
        return torch.randint(128, 8193, (batch,), generator=generator).tolist()
    # skewed: one long request among short ones
    return [32768, *torch.randint(64, 513, (batch - 1,), generator=generator).tolist()]


def paged(lengths, page, generator):
    """A shuffled paged cache holding `lengths` keys per request; (k, v, table, flashinfer's
    indptr, indices, last page lengths)."""
    needed = [-(-n // page) for n in lengths]
    total = sum(needed)
    order = torch.randperm(total, generator=generator).to(torch.int32)
    k = torch.randn(total, page, HEADS_KV, HEAD_DIM, dtype=DTYPE, device="cuda")
    v = torch.randn_like(k)
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


def decode(flashinfer, workspace, batch, page, kind, generator):
    lengths = lengths_of(kind, batch, generator)
    k, v, table, indptr, indices, last = paged(lengths, page, generator)
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
            q_data_type=DTYPE, kv_data_type=DTYPE,
        )  # fmt: skip

    def theirs():
        return wrapper.run(q[:, 0], (k, v))

    def ours():
        return nt.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, block_table=table)

    plan()
    torch.testing.assert_close(ours()[:, 0], theirs(), rtol=2e-2, atol=2e-2)
    bytes_read = 2 * sum(lengths) * HEADS_KV * HEAD_DIM * 2
    return run_pair(ours, theirs, plan, bytes_read)


def prefill(flashinfer, workspace, q_lens, k_lens, page, generator):
    k, v, table, indptr, indices, last = paged(k_lens, page, generator)
    q = torch.randn(sum(q_lens), HEADS_Q, HEAD_DIM, dtype=DTYPE, device="cuda")
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    cu_q = cu_q.cuda()
    seqused = torch.tensor(k_lens, dtype=torch.int32, device="cuda")
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")

    def plan():
        wrapper.plan(
            cu_q, indptr, indices, last, HEADS_Q, HEADS_KV, HEAD_DIM, page, causal=True,
            q_data_type=DTYPE, kv_data_type=DTYPE,
        )  # fmt: skip

    def theirs():
        return wrapper.run(q, (k, v))

    def ours():
        return nt.flash_attn_varlen_func(
            q, k, v, cu_q, None, max(q_lens), max(k_lens), causal=True, block_table=table,
            seqused_k=seqused,
        )  # fmt: skip

    plan()
    torch.testing.assert_close(ours(), theirs(), rtol=2e-2, atol=2e-2)
    bytes_read = 2 * sum(k_lens) * HEADS_KV * HEAD_DIM * 2
    return run_pair(ours, theirs, plan, bytes_read)


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--quick", action="store_true", help="batches 1 and 64 only")
    parser.add_argument(
        "--pages", default="16,64", help="page sizes, comma-separated (default: 16,64)"
    )
    args = parser.parse_args()
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
                rows[name] = decode(flashinfer, workspace, batch, page, kind, generator)
                print(name, rows[name], flush=True)
    k_lens = torch.randint(128, 4097, (8,), generator=generator).tolist()
    for page in pages:
        name = f"prefill 8 ragged causal page{page}"
        rows[name] = prefill(flashinfer, workspace, k_lens, k_lens, page, generator)
        print(name, rows[name], flush=True)
        q_lens = [512] + [1] * 63
        mixed_k = [1024, *torch.randint(128, 8193, (63,), generator=generator).tolist()]
        name = f"mixed 512+63 page{page}"
        rows[name] = prefill(flashinfer, workspace, q_lens, mixed_k, page, generator)
        print(name, rows[name], flush=True)
    device = torch.cuda.get_device_name()
    result = {"device": device, "flashinfer": flashinfer.__version__, "rows": rows}
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
