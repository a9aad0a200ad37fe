"""Sampling's speed (issue 32): `ntops_prebuilt.sample` on a batch of logits over
Llama-3's vocabulary (128256) at batch 1, 32 and 256, bf16 and fp32, against
FlashInfer's sampling functions (flashinfer_calls says which) and against
torch's sort-based sampler (vLLM's torch path: sort, mask top-k and top-p, softmax,
multinomial), side by side in one process; GPU us per call in CUDA graphs (median),
FlashInfer eager where its functions cannot be captured. Greedy: against torch.argmax.

    PYTHONPATH=.site:.fisite python3 tests/benchmarks/bench_sampling.py [--json OUT]
"""

import argparse
import json
import statistics

import torch

import ntops_prebuilt as nt

VOCABULARY = 128256


def graph_us(call, repeats=5, replays=20):
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return _timed(graph.replay, repeats, replays)


def eager_us(call, repeats=5, replays=20):
    call()
    return _timed(call, repeats, replays)


def _timed(call, repeats, replays):
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / replays)
    return statistics.median(times)


def best_us(call):
    """In a CUDA graph where the call can be captured, else eager."""
    try:
        return graph_us(call), "graph"
    except Exception:  # a capture that fails: time it eagerly
        torch.cuda.synchronize()
        return eager_us(call), "eager"


def torch_sampler(logits, temperature, top_k, top_p, min_p):
    """vLLM's torch path: sort, mask top-k and top-p, softmax, multinomial."""
    x = logits.float() / temperature
    if min_p:
        probs = x.softmax(-1)
        x = x.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), float("-inf"))
    ordered, order = x.sort(-1, descending=False)
    if top_k:
        kth = ordered[:, -top_k][:, None]
        ordered = ordered.masked_fill(ordered < kth, float("-inf"))
    if top_p:
        cumulative = ordered.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - top_p
        drop[:, -1] = False
        ordered = ordered.masked_fill(drop, float("-inf"))
    x = torch.empty_like(ordered).scatter_(-1, order, ordered)
    return torch.multinomial(x.softmax(-1), 1)[:, 0]


def flashinfer_calls(flashinfer):
    """FlashInfer's function for each case: its sampling module's kernels (from logits,
    or from its softmax's probabilities). Top-k with top-p is its "joint" order (one
    kernel): its "top_k_first" path needs its radix top-k module, whose JIT build took
    more than 3.5 minutes of device time (2026-11-27) and was not measured."""
    sampling = flashinfer.sampling

    def probs(x):
        return sampling.softmax(x)

    return {
        "plain": lambda x: sampling.sampling_from_logits(x),
        "top-k 50": lambda x: sampling.top_k_sampling_from_probs(probs(x), 50),
        "top-p 0.9": lambda x: sampling.top_p_sampling_from_probs(probs(x), 0.9),
        "min-p 0.1": lambda x: sampling.min_p_sampling_from_probs(probs(x), 0.1),
        "top-k 50, top-p 0.9": lambda x: sampling.top_k_top_p_sampling_from_logits(
            x, 50, 0.9, filter_apply_order="joint"
        ),
    }


CASES = {  # (temperature, top_k, top_p, min_p)
    "plain": (1.0, None, None, None),
    "top-k 50": (1.0, 50, None, None),
    "top-p 0.9": (1.0, None, 0.9, None),
    "min-p 0.1": (1.0, None, None, 0.1),
    "top-k 50, top-p 0.9": (1.0, 50, 0.9, None),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--batches", default="1,32,256")
    arguments = parser.parse_args()
    try:
        import flashinfer

        theirs = flashinfer_calls(flashinfer)
    except ImportError:
        theirs = {}
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for batch in map(int, arguments.batches.split(",")):
            torch.manual_seed(batch)
            logits = (torch.randn(batch, VOCABULARY, device="cuda") * 4).to(dtype)
            ours = graph_us(lambda logits=logits: nt.sample(logits, 0.0))
            argmax = graph_us(lambda logits=logits: logits.argmax(-1))
            rows.append({"dtype": str(dtype), "batch": batch, "case": "greedy", "ours": ours,
                         "torch": argmax})  # fmt: skip
            for case, (t, k, p, q) in CASES.items():
                row = {"dtype": str(dtype), "batch": batch, "case": case}
                row["ours"] = graph_us(
                    lambda x=logits, t=t, k=k, p=p, q=q: nt.sample(x, t, k, p, q)
                )
                row["torch"] = graph_us(
                    lambda x=logits, t=t, k=k, p=p, q=q: torch_sampler(x, t, k, p, q)
                )
                if case in theirs:
                    call = theirs[case]
                    row["flashinfer"], row["flashinfer_mode"] = best_us(
                        lambda x=logits, f=call: f(x)
                    )
                rows.append(row)
    header = ("dtype", "batch", "case", "ours us", "torch", "/ours", "FlashInfer", "/ours")
    print("{:15} {:>5} {:22} {:>8} {:>8} {:>6} {:>10} {:>6}".format(*header))
    for row in rows:
        fi = row.get("flashinfer")
        fi_text = f"{fi:10.1f} {fi / row['ours']:6.2f}" if fi else " " * 17
        speed = row["torch"] / row["ours"]
        print(
            f"{row['dtype']:15} {row['batch']:5d} {row['case']:22} {row['ours']:8.1f} "
            f"{row['torch']:8.1f} {speed:6.2f} {fi_text} {row.get('flashinfer_mode', '')}"
        )
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
