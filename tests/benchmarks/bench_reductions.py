"""The reductions an LLM service runs, against torch, in CUDA graphs (GPU time, the host
out of it): greedy decoding's argmax over a vocabulary of 128256 logits at batch 1 to
256, log-sum-exp over the same rows (log-probabilities), mean and log-sum-exp over a
hidden size of 4096 at 1 to 4096 rows, and reductions of a whole tensor (a launch over
chunks, then over their results) and along its leading dim (rows side by side: layout
"columns"). Each call is checked against torch first; then a graph
of `calls` calls of each is replayed, the methods taking turns, median of repeats.

    python tests/benchmarks/bench_reductions.py [--json bench_reductions.json]
"""

import argparse
import json
import statistics

import torch

VOCABULARY, HIDDEN = 128256, 4096


def graph_us(function, calls=20, repeats=7):
    """Median GPU microseconds of one call, from a CUDA graph of `calls` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            function()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            function()
    graph.replay()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def _case(name, nt, function, *args):
    """(name, ours, torch's): `function` of ntops_prebuilt and of torch on `args`."""
    ours, theirs = getattr(nt, function), getattr(torch, function)
    return name, lambda: ours(*args), lambda: theirs(*args)


def cases(nt):
    """(name, ours, torch's) for every row of the benchmark, each checked once."""
    found = []
    for dtype in (torch.bfloat16, torch.float32):
        short = str(dtype)[6:]
        for batch in (1, 8, 64, 256):
            logits = torch.randn(batch, VOCABULARY, device="cuda", dtype=dtype)
            found.append(_case(f"argmax {short} ({batch}, {VOCABULARY})", nt, "argmax", logits, -1))
        for batch in (1, 64):
            logits = torch.randn(batch, VOCABULARY, device="cuda", dtype=dtype)
            name = f"logsumexp {short} ({batch}, {VOCABULARY})"
            found.append(_case(name, nt, "logsumexp", logits, -1))
        for rows in (1, 16, 256, 4096):
            hidden = torch.randn(rows, HIDDEN, device="cuda", dtype=dtype)
            for function in ("mean", "logsumexp"):
                name = f"{function} {short} ({rows}, {HIDDEN})"
                found.append(_case(name, nt, function, hidden, -1))
        whole = torch.randn(4096, 4096, device="cuda", dtype=dtype)
        found += [
            _case(f"max {short} (4096, 4096), whole", nt, "max", whole),
            _case(f"argmax {short} (4096, 4096), whole", nt, "argmax", whole),
            _case(f"mean {short} (4096, 4096), whole", nt, "mean", whole),
            _case(f"mean {short} (4096, 4096), dim 0", nt, "mean", whole, 0),
            _case(f"logsumexp {short} (4096, 4096), dim 0", nt, "logsumexp", whole, 0),
            _case(f"argmax {short} (4096, 4096), dim 0", nt, "argmax", whole, 0),
        ]
        narrow = torch.randn(65536, 64, device="cuda", dtype=dtype)  # few columns, long
        found.append(_case(f"mean {short} (65536, 64), dim 0", nt, "mean", narrow, 0))
    for name, ours, theirs in found:
        _check(name, ours(), theirs())
    return found


def _check(name, got, want):
    if isinstance(want, torch.Tensor) and not want.dtype.is_floating_point:
        assert torch.equal(got, want), name
        return
    low = want.dtype in (torch.float16, torch.bfloat16)
    tolerance = 1.6e-2 if low else 2e-5
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance, msg=name)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the rows there")
    parser.add_argument("--only", default="", help="the rows whose names hold this text")
    options = parser.parse_args()
    import ntops_prebuilt as nt

    rows = []
    print(f"{'':44} {'ours us':>8} {'torch us':>8} {'ours/torch':>10}")
    for name, ours, theirs in cases(nt):
        if options.only not in name:
            continue
        mine, torchs = graph_us(ours), graph_us(theirs)
        rows.append({"case": name, "ours_us": mine, "torch_us": torchs})
        print(f"{name:44} {mine:8.2f} {torchs:8.2f} {mine / torchs:10.2f}")
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
