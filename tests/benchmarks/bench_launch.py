"""Eager launch cost: host microseconds per call of ntops_prebuilt against torch, side
by side in one process, at sizes small enough that the GPU never backs up the launch
queue (what is timed is the host's work per call). Each row runs with grad mode on
(torch's default) and under torch.inference_mode() (where services run).

Rows: add with out= (the launch-cost gate of the torch.library issue), add, gelu,
softmax, mm in the nn.Linear layout, and decode attention over a GQA KV cache."""

import argparse
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_add import cpu_us_per_call

F = torch.nn.functional


def rows(nt):
    """(name, ours, torch's) at launch-bound sizes."""
    half = torch.float16
    x, y, z = (torch.randn(4096, device="cuda") for _ in range(3))
    s = torch.randn(32, 128, device="cuda", dtype=half)
    a = torch.randn(16, 256, device="cuda", dtype=half)
    w = torch.randn(256, 256, device="cuda", dtype=half)  # nn.Linear's (out, in)
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=half)
    k, v = (torch.randn(1, 8, 128, 128, device="cuda", dtype=half) for _ in range(2))
    return [
        ("add out=", lambda: nt.add(x, y, out=z), lambda: torch.add(x, y, out=z)),
        ("add", lambda: nt.add(x, y), lambda: torch.add(x, y)),
        ("gelu", lambda: nt.gelu(x), lambda: F.gelu(x)),
        ("softmax", lambda: nt.softmax(s, -1), lambda: torch.softmax(s, -1)),
        ("mm x @ W.t()", lambda: nt.mm(a, w.t()), lambda: torch.mm(a, w.t())),
        (
            "sdpa decode GQA",
            lambda: nt.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        ),
    ]


def measure(nt):
    results = []
    for mode in ("grad", "inference"):
        context = torch.inference_mode() if mode == "inference" else torch.enable_grad()
        with context:
            table = rows(nt)
            methods = {}
            for name, ours, theirs in table:
                methods[f"{name} ours"], methods[f"{name} torch"] = ours, theirs
            us = cpu_us_per_call(methods)
        for name, _, _ in table:
            ours, theirs = us[f"{name} ours"], us[f"{name} torch"]
            results.append(
                {"op": name, "mode": mode, "ours_us": ours, "torch_us": theirs,
                 "ratio": ours / theirs}
            )  # fmt: skip
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    import ntops_prebuilt as nt

    results = measure(nt)
    print(f"{'op':18s} {'mode':10s} {'ours us':>8s} {'torch us':>9s} {'ours/torch':>10s}")
    for r in results:
        print(
            f"{r['op']:18s} {r['mode']:10s} {r['ours_us']:8.2f} {r['torch_us']:9.2f} "
            f"{r['ratio']:10.3f}"
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
