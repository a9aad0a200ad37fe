"""Device time of the heavier kernels against torch, side by side in one run: mm bf16
4096^3, causal SDPA fp16 (4, 32, 4096, 128), and softmax / layer_norm / rms_norm on
(8192, 8192) fp16. CUDA events around back-to-back calls, median of repeats, the
methods taking turns."""

import argparse
import json
import statistics

import torch

F = torch.nn.functional


def device_ms(cases, iterations=20, repeats=7):
    for ours, theirs in cases.values():
        ours()
        theirs()
    samples = {name: ([], []) for name in cases}
    for _ in range(repeats):
        for name, functions in cases.items():
            for index, function in enumerate(functions):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                for _ in range(iterations):
                    function()
                end.record()
                end.synchronize()
                samples[name][index].append(start.elapsed_time(end) / iterations)
    return {
        name: (statistics.median(ours), statistics.median(theirs))
        for name, (ours, theirs) in samples.items()
    }


def cases(nt):
    half, bf16 = torch.float16, torch.bfloat16
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=bf16) for _ in range(2))
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=half) for _ in range(3))
    x = torch.randn(8192, 8192, device="cuda", dtype=half)
    w, bias = (
        torch.randn(8192, device="cuda", dtype=half),
        torch.randn(8192, device="cuda", dtype=half),
    )
    sdpa = nt.scaled_dot_product_attention
    checks = [
        (nt.mm(a, b), a @ b, 2e-2),
        (
            sdpa(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, is_causal=True),
            2e-2,
        ),
        (nt.softmax(x, -1), torch.softmax(x, -1), 2e-3),
        (nt.layer_norm(x, (8192,), w, bias), F.layer_norm(x, (8192,), w, bias), 2e-2),
        (nt.rms_norm(x, (8192,), w), F.rms_norm(x, (8192,), w), 2e-2),
    ]
    for ours, theirs, tolerance in checks:
        torch.testing.assert_close(ours, theirs, rtol=tolerance, atol=tolerance)
    return {
        "mm bf16 4096^3": (lambda: nt.mm(a, b), lambda: torch.mm(a, b)),
        "sdpa fp16 causal (4,32,4096,128)": (
            lambda: sdpa(q, k, v, is_causal=True),
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        ),
        "softmax fp16 (8192,8192)": (lambda: nt.softmax(x, -1), lambda: torch.softmax(x, -1)),
        "layer_norm fp16 (8192,8192)": (
            lambda: nt.layer_norm(x, (8192,), w, bias),
            lambda: F.layer_norm(x, (8192,), w, bias),
        ),
        "rms_norm fp16 (8192,8192)": (
            lambda: nt.rms_norm(x, (8192,), w),
            lambda: F.rms_norm(x, (8192,), w),
        ),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    import ntops_prebuilt as nt

    results = device_ms(cases(nt))
    work = {
        "mm bf16 4096^3": 2 * 4096**3 / 1e12,  # TFLOP
        "sdpa fp16 causal (4,32,4096,128)": 4 * 4 * 32 * 4096 * 4096 * 128 / 2 / 1e12,
    }
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": {}}
    print(f"device: {report['device']}, torch {report['torch']}")
    print(f"{'case':36s} {'ours ms':>9s} {'torch ms':>9s} {'torch/ours':>10s}")
    for name, (ours, theirs) in results.items():
        entry = {"ours_ms": ours, "torch_ms": theirs, "speed_vs_torch": theirs / ours}
        if name in work:
            entry["ours_tflops"] = work[name] / (ours / 1e3)
            entry["torch_tflops"] = work[name] / (theirs / 1e3)
        report["cases"][name] = entry
        print(f"{name:36s} {ours:9.3f} {theirs:9.3f} {theirs / ours:10.3f}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=1)


if __name__ == "__main__":
    main()
