"""`make bench-products`: ntops_prebuilt.mm(x, W.t()) against F.linear(x, W) (cuBLAS), W in
nn.Linear layout (out, in), on the projections of Llama-3-8B, Qwen2.5-7B and Llama-3.2-1B
(fused qkv and gate_up, o, down, and the unfused MLP's up projection) at 1 to 4096 rows,
bf16 and fp16: issue 29's products at 65-256 rows, beside decode's and prefill's.

Device time as bench_layer.py measures it (its `measure`: ntops_prebuilt.tune's gpu_us,
CUDA events around calls queued behind a GPU sleep; medians of repeats, ours and cuBLAS
taking turns). The weights rotate among copies over 256 MiB, so that every call reads its
weight from HBM as a model step does, not from the L2. Every result is checked against
torch's first. --ops adds addmm (x @ W.t() + bias, against F.linear with the bias) and
matmul of a 3-D x (4 sequences of rows / 4 tokens, against F.linear). Imports no Triton.

Per model and dtype, markdown tables: speed = cuBLAS us / ours us (over 1: ours faster),
rows across, projections down; the HBM rate at rows <= 64 (bytes: the weight, x and the
output) and TFLOP/s at every row, ours / cuBLAS. Then every cell under 0.95 and the
geometric mean.

    python tests/benchmarks/bench_products.py [--quick] [--models llama8b,qwen7b,llama1b]
        [--rows 1,96,256] [--dtypes bf16,fp16] [--ops mm,addmm,matmul] [--json OUT.json]
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import bench_layer as layer

import ntops_prebuilt as nt

F = torch.nn.functional
MODELS = {"llama8b": layer.LLAMA_8B, "qwen7b": layer.QWEN_7B, "llama1b": layer.LLAMA_1B}
ROWS = (1, 8, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256, 512, 1024, 2048, 4096)
QUICK_ROWS = (1, 32, 64, 96, 128, 192, 256, 2048)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MEMORY_BOUND_ROWS = 64  # at most this many rows, the weight is nearly all the traffic
SLOW = 0.95  # cells under this speed are listed at the end
BATCH = 4  # matmul's x: (BATCH, rows / BATCH, in)
OURS, CUBLAS = "ntops_prebuilt", "cuBLAS"
METHOD = [
    "gpu_us: CUDA events around N back-to-back calls queued behind a GPU sleep longer than "
    "the host takes to issue them, / N: device time without host gaps (ntops_prebuilt.tune)",
    "figures: medians of repeats, ours and cuBLAS taking turns; each result checked first",
    "weights (and biases) rotate among copies over 256 MiB, defeating the 50 MB L2",
    "bytes: the weight, the bias (addmm), x and the output, once each",
]
# ours and torch's call per op, on (x, W, bias): x @ W.t() (+ bias), W (out, in).
OPS = {
    "mm": (lambda x, w, b: nt.mm(x, w.t()), lambda x, w, b: F.linear(x, w)),
    "addmm": (lambda x, w, b: nt.addmm(b, x, w.t()), F.linear),
    "matmul": (lambda x, w, b: nt.matmul(x, w.t()), lambda x, w, b: F.linear(x, w)),
}


def projections(model):
    """The layer's products (in, out), and the unfused MLP's up (or gate) projection."""
    return {**model.linears, "mlp": (model.hidden, model.intermediate)}


def randn(dtype, *shape, scale=1.0):
    return torch.randn(shape, device="cuda", dtype=dtype) * scale


def projection_cells(args, model, dtype_name, label, features, effort):
    """Every row count and op of one projection, each checked, then timed: its weights (and
    biases) made once, as many copies as pass bench_layer's ROTATION_BYTES."""
    dtype, (inner, outer) = DTYPES[dtype_name], features
    copies = layer.rotation(dtype.itemsize * outer * inner)
    weights = [
        (randn(dtype, outer, inner, scale=0.02), randn(dtype, outer, scale=0.1))
        for _ in range(copies)
    ]
    for rows in args.rows:
        x = randn(dtype, rows, inner)
        for op in args.ops:
            if op == "matmul" and rows % BATCH:
                continue  # no whole sequences
            shaped = x.view(BATCH, rows // BATCH, inner) if op == "matmul" else x
            operands = [(shaped, weight, bias) for weight, bias in weights]
            ours, theirs = OPS[op]
            bias_size = outer if op == "addmm" else 0
            name = f"{model.name} {dtype_name} {op} {label} M={rows}"
            error = layer.check(name, ours(*operands[0]), theirs(*operands[0]))
            methods = {
                OURS: layer.rotating(ours, operands),
                CUBLAS: layer.rotating(theirs, operands),
            }
            us = {key: value["gpu_us"] for key, value in layer.measure(methods, effort).items()}
            yield {
                "model": model.name,
                "dtype": dtype_name,
                "op": op,
                "projection": label,
                "inner": inner,
                "outer": outer,
                "rows": rows,
                "gpu_us": us,
                "speed": us[CUBLAS] / us[OURS],
                "bytes": dtype.itemsize * (outer * inner + bias_size + rows * (inner + outer)),
                "flops": 2 * rows * inner * outer,
                "error": error,
            }


def rates(cell, work):
    """Ours / cuBLAS in TB/s (work "bytes") or TFLOP/s ("flops"): work per us / 1e6."""
    return " / ".join(f"{cell[work] / (cell['gpu_us'][key] * 1e6):.2f}" for key in (OURS, CUBLAS))


def markdown(title, columns, lines, text):
    """A markdown table: `lines` (label -> {rows: cell}) down, `columns` (rows) across."""
    print(f"\n{title}\n")
    print("| projection \\ rows | " + " | ".join(map(str, columns)) + " |")
    print("|---|" + "---:|" * len(columns))
    for label, by_rows in lines.items():
        cells = [text(by_rows[rows]) if rows in by_rows else "" for rows in columns]
        print(f"| {label} | " + " | ".join(cells) + " |")


def print_tables(cells):
    """Per model and dtype: speeds, then HBM TB/s at memory-bound rows, then TFLOP/s."""
    groups = {}
    for cell in cells:
        groups.setdefault((cell["model"], cell["dtype"]), []).append(cell)
    for (model, dtype), group in groups.items():
        columns = sorted({cell["rows"] for cell in group})
        lines = {}
        for cell in group:
            op = "" if cell["op"] == "mm" else f" ({cell['op']})"
            label = f"{cell['projection']} {cell['inner']}->{cell['outer']}{op}"
            lines.setdefault(label, {})[cell["rows"]] = cell
        mean = statistics.geometric_mean(cell["speed"] for cell in group)
        title = f"{model}, {dtype}: cuBLAS us / ours us (geomean {mean:.2f})"
        markdown(title, columns, lines, lambda cell: f"{cell['speed']:.2f}")
        memory_bound = [rows for rows in columns if rows <= MEMORY_BOUND_ROWS]
        if memory_bound:
            title = f"{model}, {dtype}: HBM TB/s, ours / cuBLAS"
            markdown(title, memory_bound, lines, lambda cell: rates(cell, "bytes"))
        title = f"{model}, {dtype}: TFLOP/s, ours / cuBLAS"
        markdown(title, columns, lines, lambda cell: rates(cell, "flops"))


def print_summary(cells):
    slow = [cell for cell in cells if cell["speed"] < SLOW]
    print(f"\ncells under {SLOW} ({len(slow)} of {len(cells)}):")
    for cell in slow:
        us = cell["gpu_us"]
        print(
            f"  {cell['model']} {cell['dtype']} {cell['op']} {cell['projection']} "
            f"M={cell['rows']}: {cell['speed']:.2f} (ours {us[OURS]:.1f} us, "
            f"cuBLAS {us[CUBLAS]:.1f} us)"
        )
    mean = statistics.geometric_mean(cell["speed"] for cell in cells)
    print(f"geometric mean of cuBLAS / ours over {len(cells)} cells: {mean:.3f}")


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"fewer repeats, rows {','.join(map(str, QUICK_ROWS))} and bf16 (unless given)",
    )
    parser.add_argument(
        "--models", type=layer.names(MODELS), default=list(MODELS.values()), help="default: all"
    )
    parser.add_argument("--rows", type=lambda text: [int(rows) for rows in text.split(",")])
    parser.add_argument("--dtypes", type=layer.names({name: name for name in DTYPES}))
    parser.add_argument("--ops", type=layer.names({op: op for op in OPS}), default=["mm"])
    parser.add_argument("--json", help="also write every figure here")
    args = parser.parse_args()
    if args.rows is None:
        args.rows = QUICK_ROWS if args.quick else ROWS
    if args.dtypes is None:
        args.dtypes = ["bf16"] if args.quick else list(DTYPES)
    return args


def main():
    args = parse_args()
    effort = layer.QUICK if args.quick else layer.FULL
    cells = []
    for model in args.models:
        for dtype_name in args.dtypes:
            for label, features in projections(model).items():
                print(f"{model.name} {dtype_name} {label}", file=sys.stderr)
                cells += projection_cells(args, model, dtype_name, label, features, effort)
    layer.assert_no_compiler()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print_tables(cells)
    print_summary(cells)
    if args.json:
        report = {**layer.provenance(nt), "method": METHOD, "cells": cells}
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
