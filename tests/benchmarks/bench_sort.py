"""sort and topk's speed (issue 32): the wheel's topk on rows of logits (Llama-3's
vocabulary, 128256) at batch 1 to 256, k from 1 to 1024, bf16 and fp32, and its sort,
argsort and topk on short rows (64 to 1000 elements; topk of rows of 3000 and 4096),
each against torch's in CUDA graphs, side by side in one run; the logits also 2 bytes
off a 16-byte boundary and, with --tiles, the select kernel against the tile kernels
on rows both take. GB/s counts the row read once.

    PYTHONPATH=.site python3 tests/benchmarks/bench_sort.py [--json OUT] [--tiles]
"""

import argparse
import json
import statistics

import torch

import ntops_prebuilt as nt

VOCABULARY = 128256
BATCHES = (1, 8, 64, 256)
KS = (1, 50, 1024)
SHORT = ((4096, 64, 8), (1024, 1000, 50))
LONGER = ((256, 3000, 50), (64, 4096, 1000))


def graph_us(call, repeats=5, replays=20):
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / replays)
    return statistics.median(times)


def misaligned(x):
    """`x`'s values in a view 2 bytes off a 16-byte boundary (rows still contiguous)."""
    storage = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = storage[1:].view(x.shape)
    view.copy_(x)
    return view


def row(what, batch, n, k, dtype, ours_us, torch_us, x):
    gbps = x.numel() * x.element_size() / ours_us / 1e3
    print(
        f"{what:24} {batch:5} {n:7} {k:5} {str(dtype)[6:]:9} {ours_us:9.1f} {torch_us:9.1f} "
        f"{torch_us / ours_us:6.2f}x {gbps:7.0f}",
        flush=True,
    )
    return {
        "what": what, "batch": batch, "n": n, "k": k, "dtype": str(dtype)[6:],
        "ours_us": ours_us, "torch_us": torch_us, "gbps": gbps,
    }  # fmt: skip


def logits(found):
    for dtype in (torch.bfloat16, torch.float32):
        for batch in BATCHES:
            x = torch.randn(batch, VOCABULARY, device="cuda").to(dtype) * 3
            for k in KS:
                theirs = graph_us(lambda x=x, k=k: torch.topk(x, k))
                ours = graph_us(lambda x=x, k=k: nt.topk(x, k))
                found.append(row("topk", batch, VOCABULARY, k, dtype, ours, theirs, x))
            shifted = misaligned(x)
            ours = graph_us(lambda x=shifted: nt.topk(x, 50))
            theirs = graph_us(lambda x=shifted: torch.topk(x, 50))
            found.append(row("topk misaligned", batch, VOCABULARY, 50, dtype, ours, theirs, x))


def short(found):
    for dtype in (torch.bfloat16, torch.float32):
        for batch, n, k in SHORT:
            x = torch.randn(batch, n, device="cuda").to(dtype)
            for what, mine, reference in (
                ("sort", lambda x=x: nt.sort(x), lambda x=x: torch.sort(x)),
                ("argsort", lambda x=x: nt.argsort(x), lambda x=x: torch.argsort(x)),
                ("topk", lambda x=x, k=k: nt.topk(x, k), lambda x=x, k=k: torch.topk(x, k)),
            ):
                ours, theirs = graph_us(mine), graph_us(reference)
                kept = k if what == "topk" else n
                found.append(row(what, batch, n, kept, dtype, ours, theirs, x))
        for batch, n, k in LONGER:
            x = torch.randn(batch, n, device="cuda").to(dtype)
            ours = graph_us(lambda x=x, k=k: nt.topk(x, k))
            theirs = graph_us(lambda x=x, k=k: torch.topk(x, k))
            found.append(row("topk", batch, n, k, dtype, ours, theirs, x))


def tiles(found):
    """The select kernel on rows the tile kernels sort (the runtime takes the tiles)."""
    from ntops_prebuilt import _C, _sort

    for batch, n in ((4096, 64), (1024, 1000)):
        x = torch.randn(batch, n, device="cuda", dtype=torch.bfloat16)
        values, indices = (
            torch.empty_like(x),
            torch.empty(x.shape, dtype=torch.int64, device="cuda"),
        )
        tile = graph_us(lambda x=x: nt.sort(x))
        select = graph_us(lambda x=x, v=values, i=indices: _C.launch(_sort._SELECT, x, v, i, 0))
        found.append(row("select vs tile", batch, n, n, x.dtype, select, tile, x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--tiles", action="store_true")
    options = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'':24} {'batch':>5} {'n':>7} {'k':>5} {'dtype':9} {'ours us':>9} {'torch us':>9} "
          f"{'speedup':>7} {'GB/s':>7}")  # fmt: skip
    found = []
    logits(found)
    short(found)
    if options.tiles:
        tiles(found)
    if options.json:
        with open(options.json, "w") as out:
            json.dump(found, out, indent=1)


if __name__ == "__main__":
    main()
