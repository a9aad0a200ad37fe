"""FP8 quantization's speed (issue 31): the wheel's scaled_fp8_quant and
per_token_group_quant_fp8 on activations of a Llama-3-8B layer (hidden 4096, MLP
14336) at decode and prefill sizes, in CUDA graphs, against the same math in torch
(eager ops, as a user without kernels writes it) and against a copy of the input (a
bf16 read and a bf16 write: the bandwidth this machine reaches), side by side in one
run. GB/s counts what the kernel must move: the input read, the values and scales
written (and for a dynamic per-tensor scale, the input read twice).

    PYTHONPATH=.site python3 tests/benchmarks/bench_fp8.py [--json OUT]
"""

import argparse
import json
import statistics

import torch

import ntops_prebuilt as nt
from ntops_prebuilt import _fp8_reference as reference

SHAPES = ((1, 4096), (16, 4096), (256, 4096), (2048, 4096), (8192, 4096), (2048, 14336))


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


def cases(x):
    rows = x.shape[0]
    static = torch.tensor([0.01], device="cuda")
    size = x.numel()
    written = size + 4 * rows  # values, and a scale a row
    return {
        "per tensor, static": (
            lambda: nt.scaled_fp8_quant(x, static),
            lambda: reference.scaled_reference(x, static),
            2 * size + size,
        ),
        "per tensor, dynamic": (
            lambda: nt.scaled_fp8_quant(x),
            lambda: reference.scaled_reference(x),
            2 * 2 * size + size,
        ),
        "per token": (
            lambda: nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True),
            lambda: reference.scaled_reference(x, None, True),
            2 * size + written,
        ),
        "groups of 128": (
            lambda: nt.per_token_group_quant_fp8(x, 128),
            lambda: reference.group_reference(x, 128),
            2 * size + size + 4 * size // 128,
        ),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    options = parser.parse_args()
    rows_out = []
    for shape in SHAPES:
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        copy = torch.empty_like(x)
        copy_us = graph_us(lambda x=x, copy=copy: copy.copy_(x))
        copy_gbps = 4 * x.numel() / copy_us / 1e3
        for name, (ours, theirs, moved) in cases(x).items():
            us, torch_us = graph_us(ours), graph_us(theirs)
            row = {
                "shape": list(shape),
                "case": name,
                "us": round(us, 2),
                "torch_us": round(torch_us, 2),
                "speed_vs_torch": round(torch_us / us, 2),
                "GBps": round(moved / us / 1e3),
                "of_copy": round(moved / us / 1e3 / copy_gbps, 3),
                "copy_GBps": round(copy_gbps),
            }
            rows_out.append(row)
            print(
                f"{shape!s:14s} {name:20s} {us:8.2f} us  torch {torch_us:8.2f} us "
                f"({row['speed_vs_torch']:5.2f}x)  {row['GBps']:5d} GB/s = "
                f"{row['of_copy']:.2f} of a copy ({row['copy_GBps']} GB/s)",
                flush=True,
            )
    fused_out = fused()
    products_out = scaled_products()
    if options.json:
        result = {
            "device": torch.cuda.get_device_name(),
            "rows": rows_out,
            "fused": fused_out,
            "products": products_out,
        }
        with open(options.json, "w") as file:
            json.dump(result, file, indent=1)


def _fused_cases(x, weight, gate, up, group):
    """{op: (fused, the op alone, the op then the quantization)}."""
    n, width = x.shape[-1], gate.shape[-1]
    return {
        "rms_norm": (
            lambda: nt.rms_norm_quant_fp8(x, weight, 1e-6, group),
            lambda: nt.rms_norm(x, (n,), weight, 1e-6),
            lambda: nt.per_token_group_quant_fp8(nt.rms_norm(x, (n,), weight, 1e-6), group or n),
        ),
        "silu_mul": (
            lambda: nt.silu_mul_quant_fp8(gate, up, group),
            lambda: nt.silu_mul(gate, up),
            lambda: nt.per_token_group_quant_fp8(nt.silu_mul(gate, up), group or width),
        ),
    }


def fused():
    """The fused forms against the op they extend alone (rms_norm, silu_mul: bf16 out)
    and against that op followed by the quantization (two kernels), same run."""
    found = []
    for rows in (1, 16, 256, 2048, 8192):
        x = torch.randn(rows, 4096, device="cuda", dtype=torch.bfloat16)
        weight = torch.rand(4096, device="cuda", dtype=torch.bfloat16)
        gate, up = (torch.randn(rows, 14336, device="cuda", dtype=torch.bfloat16) for _ in "gu")
        for group in (None, 128):
            cases = _fused_cases(x, weight, gate, up, group)
            for name, (together, alone, apart) in cases.items():
                us, alone_us, apart_us = (graph_us(call) for call in (together, alone, apart))
                row = {
                    "rows": rows,
                    "case": f"{name} + {'per token' if group is None else 'groups of 128'}",
                    "us": round(us, 2),
                    "op_alone_us": round(alone_us, 2),
                    "over_op_alone": round(us / alone_us, 3),
                    "two_kernels_us": round(apart_us, 2),
                }
                found.append(row)
                print(
                    f"rows {rows:5d} {row['case']:26s} fused {us:8.2f} us, {name} alone "
                    f"{alone_us:8.2f} us ({row['over_op_alone']:.2f}x), {name} then the "
                    f"quantization {apart_us:8.2f} us",
                    flush=True,
                )
    return found


# Llama-3-8B's projections as (K, N): fused QKV, output, fused gate/up, down.
PROJECTIONS = {
    "qkv": (4096, 6144),
    "o": (4096, 4096),
    "gate_up": (4096, 28672),
    "down": (14336, 4096),
}
PRODUCT_ROWS = (1, 16, 64, 128, 256, 2048)


def scaled_products():
    """scaled_mm against torch._scaled_mm (cuBLAS), per tensor and row-wise scales, bf16
    results, weights in nn.Linear's layout rotating over 256 MB (no L2 reuse between
    calls); w8a8_block_fp8_matmul (128-block scales, which torch refuses on sm_90)
    against our per-tensor product; and the bf16 products (ours and cuBLAS's)."""
    e4m3 = torch.float8_e4m3fn
    found = []
    for name, (k, n) in PROJECTIONS.items():
        copies = max(1, 256 * 2**20 // (k * n))
        weights = [(torch.randn(n, k, device="cuda") / 8).to(e4m3) for _ in range(copies)]
        halves = [w.to(torch.bfloat16) for w in weights[: max(1, copies // 2)]]
        for rows in PRODUCT_ROWS:
            x = (torch.randn(rows, k, device="cuda") * 2).to(e4m3)
            x16 = x.to(torch.bfloat16)
            one = torch.ones((), device="cuda")
            by_row, by_column = torch.rand(rows, 1, device="cuda"), torch.rand(1, n, device="cuda")
            kinds = {"per tensor": (one, one), "row-wise": (by_row, by_column)}
            row = {"projection": name, "rows": rows}
            for kind, (sa, sb) in kinds.items():
                ours = _rotating(
                    weights,
                    lambda w, x=x, sa=sa, sb=sb: nt.scaled_mm(
                        x, w.t(), sa, sb, out_dtype=torch.bfloat16
                    ),
                )
                theirs = _rotating(
                    weights,
                    lambda w, x=x, sa=sa, sb=sb: torch._scaled_mm(
                        x, w.t(), sa, sb, out_dtype=torch.bfloat16
                    ),
                )
                row[kind] = {"us": round(ours, 2), "torch_us": round(theirs, 2),
                             "speed": round(theirs / ours, 3)}  # fmt: skip
            x_scale = torch.rand(rows, k // 128, device="cuda")
            w_scale = torch.rand(-(-n // 128), k // 128, device="cuda")
            block = _rotating(
                weights,
                lambda w, x=x, xs=x_scale, ws=w_scale: nt.w8a8_block_fp8_matmul(
                    x, w, xs, ws, [128, 128], torch.bfloat16
                ),
            )
            row["128-block"] = {
                "us": round(block, 2),
                "over_per_tensor": round(block / row["per tensor"]["us"], 3),
            }
            row["bf16_us"] = round(_rotating(halves, lambda w, x16=x16: nt.mm(x16, w.t())), 2)
            row["bf16_cublas_us"] = round(
                _rotating(halves, lambda w, x16=x16: torch.nn.functional.linear(x16, w)), 2
            )
            found.append(row)
            print(
                f"{name:8s} rows {rows:5d}  per tensor {row['per tensor']['us']:8.2f} us "
                f"({row['per tensor']['speed']:.2f}x torch)  row-wise {row['row-wise']['us']:8.2f}"
                f" us ({row['row-wise']['speed']:.2f}x)  128-block {block:8.2f} us "
                f"({row['128-block']['over_per_tensor']:.2f}x ours per tensor)  bf16 ours "
                f"{row['bf16_us']:8.2f} "
                f"cuBLAS {row['bf16_cublas_us']:8.2f} us",
                flush=True,
            )
    return found


def _rotating(weights, call):
    """Device us per call of `call` over each weight in turn, in one CUDA graph."""
    calls = [lambda w=w: call(w) for w in weights]

    def all_of_them():
        for one in calls:
            one()

    return graph_us(all_of_them) / len(calls)


if __name__ == "__main__":
    main()
