"""`make bench` (issue 33): a Llama-3-8B-shaped transformers model (hidden 4096, 32 query
heads over 8 key/value heads, MLP 14336, vocabulary 128256; a few layers, random bf16
weights) generating greedily after a 512-token prompt, batch 1 and 8: time to first token
(TTFT: generate() of one token, the prefill and its sampling) and time per generated
token after it (TPOT: the difference to generate() of `--tokens` tokens, per token), wall
time as a user sees it, four ways:

- stock eager: transformers' own model, sdpa attention, its dynamic cache;
- stock compiled: with a static cache, generate() compiling the decode step itself
  (torch.compile, Inductor, reduce-overhead: CUDA graphs), as transformers documents;
- ntops eager and ntops compiled: the same after ntops_prebuilt.integrations.transformers'
  apply(model).

Each way runs in a process of its own (this script with --worker): the eager ones import
no compiler, and a timeout of the whole leaves the ways measured so far in the JSON, which
is written after each. `--rounds N` runs the ways in turn N times and reports medians and
each round's ratio: the host's speed drifts (two runs of one round each put ntops
compiled at 0.79x and 1.10x stock compiled at batch 1). Before timing, each checks its
prefill's last logits against stock eager's in the same process (bf16: within BOUND).
Issue 33's goals: ntops eager TPOT <= 0.6x stock eager's, ntops compiled <= 1.0x stock
compiled's.

`--checkpoint compressed`: the same model as a compressed-tensors FP8 checkpoint loads
with `use_optimized_inference=True` (every linear but the head a
CompressedTensorsFP8Linear, weights e4m3 with a scale per output feature,
`tests/hf_models.compressed`): stock runs torch's scaled_mm (cuBLASLt's FP8 kernels) and
quantizes each call's activations in torch ops, ntops the wheel's quantization and
products.

    python tests/benchmarks/bench_transformers.py --json bench.json --png bench.png
    python tests/benchmarks/bench_transformers.py --from-json bench.json --png bench.png
"""

import argparse
import json
import math
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parents[2]))  # tests.hf_models

WAYS = ("stock eager", "stock compiled", "ntops eager", "ntops compiled")
LLAMA_3_8B = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
}
PROMPT = 512
# Relative error of the prefill's last logits against stock eager's in the same process
# (bf16 both): the kernels round differently, a wrong mapping is off by tens of percent.
BOUND = 5e-2


CHECKPOINTS = ("bf16", "compressed")


def model(layers, checkpoint="bf16"):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=layers, **LLAMA_3_8B)
    torch.manual_seed(0)
    with torch.device("cuda"):
        built = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    if checkpoint == "compressed":
        from tests.hf_models import compressed

        with torch.no_grad():
            compressed(built)
    built.generation_config.eos_token_id = None  # every run generates all its tokens
    built.generation_config.pad_token_id = 0
    return built


def seconds(call, repeats):
    """The median wall seconds of `call()`, synchronized, after one warm-up call."""
    import torch

    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def last_logits(built, ids):
    import torch

    with torch.no_grad():
        return built(ids, logits_to_keep=1).logits.float()


# The runtime calls that launch kernels (a CUDA graph's replay counts one).
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def decode_profile(generate, tokens, path):
    """Where a generated token's time goes: torch.profiler over generate(tokens) less
    generate(1), per token, written to `path`: each GPU kernel's microseconds and calls,
    the kernel launches and CUDA graph replays; returns (GPU busy ms, launches)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def totals(count):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as run:
            generate(count)
            torch.cuda.synchronize()
        # Kernels (and copies) are the events on the device; a CPU op's device time is
        # theirs again.
        device = torch.autograd.DeviceType.CUDA
        return {
            e.key: (e.count, e.self_device_time_total if e.device_type == device else 0.0)
            for e in run.key_averages()
        }

    short, long = totals(1), totals(tokens)
    per = {}
    for key, (count, micros) in long.items():
        less = short.get(key, (0, 0.0))
        per[key] = ((count - less[0]) / (tokens - 1), (micros - less[1]) / (tokens - 1))
    kernels = sorted(((v[1], v[0], k) for k, v in per.items() if v[1] > 0), reverse=True)
    busy = sum(micros for micros, _, _ in kernels)
    launches = sum(per.get(name, (0, 0))[0] for name in LAUNCHES)
    graphs = per.get("cudaGraphLaunch", (0, 0))[0]
    lines = [
        f"per generated token: GPU busy {busy / 1e3:.3f} ms, {launches:.1f} kernel launches, "
        f"{graphs:.1f} CUDA graph replays",
        "us/token  calls/token  kernel",
    ]
    lines += [f"{micros:9.1f}  {calls:11.1f}  {name[:110]}" for micros, calls, name in kernels]
    with open(path, "w") as file:
        file.write("\n".join(lines) + "\n")
    return busy / 1e3, launches


def worker(way, layers, batches, tokens, repeats, profiles=None, checkpoint="bf16"):
    """One way's figures, as one JSON line on stdout; with `profiles` (a folder), each
    batch's decode profile there too (`decode_profile`)."""
    import torch

    built = model(layers, checkpoint)
    reference = {}
    for batch in batches:
        ids = torch.randint(3, LLAMA_3_8B["vocab_size"], (batch, PROMPT), device="cuda")
        reference[batch] = (ids, last_logits(built, ids))
    if way.startswith("ntops"):
        import ntops_prebuilt
        from ntops_prebuilt.integrations import transformers as integration

        ntops_prebuilt.preload()
        integration.apply(built)
    options = {"do_sample": False}
    if way.endswith("compiled"):
        options["cache_implementation"] = "static"
    figures = {}
    for batch in batches:
        ids, want = reference[batch]
        got = last_logits(built, ids)
        error = ((got - want).norm() / want.norm()).item()
        assert error < BOUND, (way, batch, error)

        def generate(count, ids=ids):
            with torch.no_grad():
                built.generate(ids, max_new_tokens=count, min_new_tokens=count, **options)

        first = seconds(lambda: generate(1), repeats)
        whole = seconds(lambda: generate(tokens), repeats)  # its warm-up compiles
        figures[batch] = {
            "ttft_ms": first * 1e3,
            "tpot_ms": (whole - first) / (tokens - 1) * 1e3,
            "logits_error": error,
        }
        if profiles:
            path = f"{profiles}/profile-{way.replace(' ', '-')}-b{batch}.txt"
            busy, launches = decode_profile(generate, tokens, path)
            figures[batch].update(gpu_busy_ms=busy, launches=launches)
    print(json.dumps(figures))


def run_way(way, arguments):
    command = [sys.executable, __file__, "--worker", way, "--layers", str(arguments.layers)]
    command += ["--batches", arguments.batches, "--tokens", str(arguments.tokens)]
    command += ["--repeats", str(arguments.repeats), "--checkpoint", arguments.checkpoint]
    if arguments.profile:
        command += ["--profile", arguments.profile]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=arguments.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {arguments.timeout} s"}
    if run.returncode:
        return {"error": run.stderr[-2000:]}
    return {int(batch): row for batch, row in json.loads(run.stdout.splitlines()[-1]).items()}


def combined(rounds):
    """One way's rounds as one row a batch: each figure's median over the rounds that
    measured it, and the TPOT of every round (`tpot_rounds_ms`); an error where none
    did."""
    measured = [row for row in rounds if "error" not in row]
    if not measured:
        return rounds[-1]
    rows = {}
    for batch in measured[0]:
        figures = [row[batch] for row in measured if batch in row]
        rows[batch] = {
            key: statistics.median(figure[key] for figure in figures) for key in figures[0]
        }
        rows[batch]["tpot_rounds_ms"] = [figure["tpot_ms"] for figure in figures]
    return rows


def environment():
    import torch
    import transformers

    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def table(report):
    """Lines: per batch, each way's TTFT and TPOT, and the goals' ratios."""
    checkpoint = report.get("checkpoint", "bf16")
    lines = [f"{report['environment']}, {report['layers']} layers, {checkpoint}, prompt {PROMPT}"]
    lines.append(f"{'way':<16}{'batch':>6}{'TTFT ms':>10}{'TPOT ms':>10}")
    ways = report["ways"]
    for way in WAYS:
        for batch, row in sorted(ways.get(way, {}).items()):
            if batch != "error":
                line = f"{way:<16}{batch:>6}{row['ttft_ms']:>10.2f}{row['tpot_ms']:>10.3f}"
                if "gpu_busy_ms" in row:  # profiled: how much of TPOT the GPU was busy
                    line += f"  GPU busy {row['gpu_busy_ms']:.3f}, {row['launches']:.0f} launches"
                lines.append(line)
        if "error" in ways.get(way, {}):
            lines.append(f"{way}: failed: {ways[way]['error'].splitlines()[-1:]}")
    for kind, goal in (("eager", 0.6), ("compiled", 1.0)):
        ours, stock = ways.get(f"ntops {kind}", {}), ways.get(f"stock {kind}", {})
        for batch in sorted(b for b in ours if b != "error" and b in stock):
            ratio = ours[batch]["tpot_ms"] / stock[batch]["tpot_ms"]
            line = f"TPOT ntops / stock {kind}, batch {batch}: {ratio:.2f} (goal <= {goal})"
            pairs = zip(
                ours[batch].get("tpot_rounds_ms", ()),
                stock[batch].get("tpot_rounds_ms", ()),
                strict=False,
            )
            each = [f"{mine / theirs:.2f}" for mine, theirs in pairs]
            if len(each) > 1:  # round by round: ours against stock's run just before it
                line += f"; by round {', '.join(each)}"
            lines.append(line)
    return lines


def write_png(path, report):
    """TTFT and TPOT bars per batch and way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ways = report["ways"]
    batches = sorted({b for row in ways.values() for b in row if b != "error"})
    width = 0.8 / len(WAYS)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for axis, key, label in zip(
        axes, ("ttft_ms", "tpot_ms"), ("time to first token", "time per token"), strict=True
    ):
        for index, way in enumerate(WAYS):
            values = [ways.get(way, {}).get(b, {}).get(key, math.nan) for b in batches]
            axis.bar(
                [slot + index * width for slot in range(len(batches))], values, width, label=way
            )
        axis.set_xticks(
            [slot + 0.4 - width / 2 for slot in range(len(batches))],
            [f"batch {b}" for b in batches],
        )
        axis.set_ylabel("ms")
        axis.set_title(f"{label}, prompt {PROMPT}")
    axes[0].legend()
    environment = report["environment"]
    figure.suptitle(
        f"Llama-3-8B-shaped, {report['layers']} layers, {report.get('checkpoint', 'bf16')}: "
        "transformers "
        f"{environment['transformers']}, torch {environment['torch']}, {environment['device']}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def parse():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--tokens", type=int, default=33, help="tokens per timed generate()")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="run the ways in turn this many times, each in a new process (medians)",
    )  # fmt: skip
    parser.add_argument(
        "--ways", default=",".join(WAYS), help="comma-separated, of " + ", ".join(WAYS)
    )
    parser.add_argument("--timeout", type=float, help="seconds a way may take (default: no limit)")
    parser.add_argument("--json", help="write the figures here (after each way)")
    parser.add_argument("--png", help="draw them here (needs matplotlib)")
    parser.add_argument("--from-json", help="draw --png from this JSON instead of measuring")
    parser.add_argument(
        "--profile", help="a folder: each way's and batch's decode profile (kernels, launches)"
    )
    parser.add_argument(
        "--checkpoint", choices=CHECKPOINTS, default="bf16",
        help="bf16 weights, or a compressed-tensors FP8 checkpoint's linears",
    )  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args()


def main():
    arguments = parse()
    if arguments.worker:
        batches = [int(b) for b in arguments.batches.split(",")]
        worker(
            arguments.worker, arguments.layers, batches, arguments.tokens, arguments.repeats,
            arguments.profile, arguments.checkpoint,
        )  # fmt: skip
        return
    if arguments.from_json:
        with open(arguments.from_json) as file:
            report = json.load(file)
        report["ways"] = {
            way: {int(b) if b.isdigit() else b: row for b, row in rows.items()}
            for way, rows in report["ways"].items()
        }
    else:
        report = {
            "environment": environment(), "layers": arguments.layers,
            "checkpoint": arguments.checkpoint, "ways": {},
        }  # fmt: skip
        rounds = {way: [] for way in arguments.ways.split(",")}
        for _ in range(arguments.rounds):  # the ways in turn: the host's drift hits each
            for way in rounds:
                rounds[way].append(run_way(way, arguments))
                print(way, json.dumps(rounds[way][-1]), flush=True)
                report["ways"][way] = combined(rounds[way])
                if arguments.json:
                    with open(arguments.json, "w") as file:
                        json.dump(report, file, indent=1)
    print("\n".join(table(report)))
    if arguments.png:
        try:
            write_png(arguments.png, report)
        except ImportError:  # the figures are in the JSON: draw them where matplotlib is
            print(f"no matplotlib: no {arguments.png} (--from-json draws it elsewhere)")


if __name__ == "__main__":
    main()
