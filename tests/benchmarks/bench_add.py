"""`make bench`: ntops_prebuilt.add against torch (and a ninetoothed JIT of the same
premake when ninetoothed is installed), measured side by side in one run.

CPU time per call: bursts of calls short enough that the GPU never backs up the
launch queue, so the host cost of each call is what is timed; the methods take
turns burst by burst so that machine noise hits them alike. Cold start: fresh
processes, alternating. Device time: CUDA events around back-to-back launches.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

BURST = 200
REPEATS = 60
SMALL = 4096
LARGE = 2**26


def cpu_us_per_call(methods):
    """Median microseconds of host time per call, for each of `methods` (name -> fn)."""
    for fn in methods.values():
        for _ in range(500):
            fn()
    torch.cuda.synchronize()
    samples = {name: [] for name in methods}
    for _ in range(REPEATS):
        for name, fn in methods.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(BURST):
                fn()
            samples[name].append((time.perf_counter() - start) / BURST * 1e6)
    torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in samples.items()}


def device_ms(methods, iterations=50, repeats=7):
    """Median milliseconds of GPU time per call, CUDA events around `iterations` calls."""
    results = {name: [] for name in methods}
    for fn in methods.values():
        fn()
    for _ in range(repeats):
        for name, fn in methods.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(iterations):
                fn()
            end.record()
            end.synchronize()
            results[name].append(start.elapsed_time(end) / iterations)
    return {name: statistics.median(values) for name, values in results.items()}


_COLD = """
import time
start = time.perf_counter()
import torch
x = torch.ones({n}, device="cuda")
torch.cuda.synchronize()
ready = time.perf_counter()
{body}
torch.cuda.synchronize()
print(ready - start, time.perf_counter() - ready)
"""
_FIRST_RESULT = {
    "torch": "y = torch.add(x, x)",
    "ntops_prebuilt": "import ntops_prebuilt\ny = ntops_prebuilt.add(x, x)",
}


def cold_start_s(runs=7):
    """Median seconds for a fresh interpreter to import and produce a first result
    (the whole process), and of the part after CUDA is up (import + first call)."""
    whole = {name: [] for name in _FIRST_RESULT}
    after_cuda = {name: [] for name in _FIRST_RESULT}
    for _ in range(runs):
        for name, body in _FIRST_RESULT.items():
            script = _COLD.format(n=SMALL, body=body)
            start = time.perf_counter()
            run = subprocess.run(
                [sys.executable, "-c", script], check=True, capture_output=True, text=True
            )
            whole[name].append(time.perf_counter() - start)
            after_cuda[name].append(float(run.stdout.split()[-1]))
    median = statistics.median
    return (
        {name: median(values) for name, values in whole.items()},
        {name: median(values) for name, values in after_cuda.items()},
    )


def ninetoothed_add():
    """The same premake, compiled by ninetoothed's JIT; None if ninetoothed is absent."""
    try:
        import ninetoothed

        from ntops_aot.kernels import add as definition
    except ImportError as error:
        return None, f"not measured: {error}"
    arrangement, application, tensors = definition.premake(1, "fp32")
    kernel = ninetoothed.make(arrangement, application, tensors)
    return kernel, None


OURS, TORCH = "ntops_prebuilt.add(x, y, out=z)", "torch.add(x, y, out=z)"
JIT = "ninetoothed JIT add(x, y, 1, z)"


def measure():
    """Every figure, in one run: host time per call, device time, cold start."""
    import ntops_prebuilt as nt

    x, y, z = (torch.randn(SMALL, device="cuda") for _ in range(3))
    launch, group = nt._C.launch, nt._C.group("add-other=tensor")
    methods = {
        OURS: lambda: nt.add(x, y, out=z),
        "  of which the launcher alone": lambda: launch(group, x, y, 1, z),
        "  torch.empty_like(x) alone": lambda: torch.empty_like(x),
        TORCH: lambda: torch.add(x, y, out=z),
        "ntops_prebuilt.add(x, y)": lambda: nt.add(x, y),
        "x + y": lambda: x + y,
    }
    jit, jit_note = ninetoothed_add()
    if jit is not None:
        methods[JIT] = lambda: jit(x, y, 1.0, z)
    cpu = cpu_us_per_call(methods)

    big = [torch.randn(LARGE, device="cuda") for _ in range(3)]
    torch.testing.assert_close(nt.add(big[0], big[1]), big[0] + big[1])
    gpu = device_ms(
        {
            "ntops_prebuilt": lambda: nt.add(big[0], big[1], out=big[2]),
            "torch": lambda: torch.add(big[0], big[1], out=big[2]),
        }
    )
    cold, cold_after_cuda = cold_start_s()
    ratios = {
        "add(out=) cpu / torch.add(out=)": cpu[OURS] / cpu[TORCH],
        "add() cpu / x + y": cpu["ntops_prebuilt.add(x, y)"] / cpu["x + y"],
        "cold start / torch alone": cold["ntops_prebuilt"] / cold["torch"],
        "device throughput / torch (2^26 fp32)": gpu["torch"] / gpu["ntops_prebuilt"],
    }
    if jit is not None:
        ratios["add(out=) cpu / ninetoothed JIT"] = cpu[OURS] / cpu[JIT]
    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cpu_us_per_call": cpu,
        "device_ms_2^26_fp32": gpu,
        "device_TBps": {name: 3 * LARGE * 4 / ms / 1e9 for name, ms in gpu.items()},
        "cold_start_s": cold,
        "cold_start_after_cuda_init_s": cold_after_cuda,
        "ratios": ratios,
        "notes": [jit_note] if jit_note else [],
        "method": f"cpu: median of {REPEATS} bursts of {BURST} calls on {SMALL} fp32 elements",
    }


def print_table(report):
    print(f"device: {report['device']}, torch {report['torch']}")
    print(f"{'CPU time per call':42s} {'us':>8s}")
    for name, value in report["cpu_us_per_call"].items():
        print(f"  {name:40s} {value:8.2f}")
    for name, value in report["device_ms_2^26_fp32"].items():
        bandwidth = report["device_TBps"][name]
        print(f"  device time {name:28s} {value:8.4f} ms  {bandwidth:.2f} TB/s")
    for name, value in report["cold_start_s"].items():
        after = report["cold_start_after_cuda_init_s"][name] * 1e3
        print(f"  cold start {name:29s} {value:8.3f} s  ({after:.1f} ms after CUDA init)")
    print("ratios:")
    for name, value in report["ratios"].items():
        print(f"  {name:40s} {value:8.3f}")
    for note in report["notes"]:
        print(f"note: {note}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    report = measure()
    print_table(report)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=1)


if __name__ == "__main__":
    main()
