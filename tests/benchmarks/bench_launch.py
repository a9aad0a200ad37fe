"""Eager launch cost: host microseconds per call of ntops_prebuilt against torch, side
by side in one process, at sizes small enough that the GPU never backs up the launch
queue (what is timed is the host's work per call). Each row runs with grad mode on
(torch's default) and under torch.inference_mode() (where services run).

Rows: add with out= (the launch-cost gate of the torch.library issue), add, gelu,
softmax, rms_norm, rotary (queries, then keys), mm in the nn.Linear layout, decode
attention over a GQA KV cache, and the same with the step's key and value written into
the cache's slots; each next to the driver's floor, a no-op kernel of 4 arguments
launched from C on the same stream (bare_launch.c, built here with the system's C
compiler). With --phases, where each row's launches spend their host time: the
launcher's steps (`_C._phases`: reading the tensors, checks, shapes, allocating,
layout, choosing the kernel, stream and module, the launch, versions); the rest of a
row's time is its Python wrapper's."""

import argparse
import ctypes
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_add import BURST, REPEATS, cpu_us_per_call

F = torch.nn.functional


def rows(nt):
    """(name, ours, torch's) at launch-bound sizes."""
    half = torch.float16
    x, y, z = (torch.randn(4096, device="cuda") for _ in range(3))
    s = torch.randn(32, 128, device="cuda", dtype=half)
    hidden = torch.randn(1, 4096, device="cuda", dtype=half)
    norm = torch.randn(4096, device="cuda", dtype=half)
    a = torch.randn(16, 256, device="cuda", dtype=half)
    w = torch.randn(256, 256, device="cuda", dtype=half)  # nn.Linear's (out, in)
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=half)
    k, v = (torch.randn(1, 8, 128, 128, device="cuda", dtype=half) for _ in range(2))
    # A decode step's query and key heads (batch, seq, heads, head_dim), its angles
    heads_q = torch.randn(1, 1, 32, 128, device="cuda", dtype=half)
    heads_k = torch.randn(1, 1, 8, 128, device="cuda", dtype=half)
    sin, cos = (torch.randn(1, 64, device="cuda", dtype=half) for _ in range(2))
    # and the cache it writes its key and value into (the layer benchmark's call)
    k_cache, v_cache = (torch.randn(1, 8, 256, 128, device="cuda", dtype=half) for _ in "kv")
    k_new, v_new = (torch.randn(1, 8, 1, 128, device="cuda", dtype=half) for _ in "kv")
    position = 127

    def ours_cached():
        return nt.scaled_dot_product_attention(
            q, k_cache[:, :, : position + 1], v_cache[:, :, : position + 1], enable_gqa=True,
            present_key=k_new, present_value=v_new,
            present_key_slot=k_cache[:, :, position : position + 1],
            present_value_slot=v_cache[:, :, position : position + 1],
        )  # fmt: skip

    def torch_cached():
        k_cache[:, :, position : position + 1].copy_(k_new)
        v_cache[:, :, position : position + 1].copy_(v_new)
        return F.scaled_dot_product_attention(
            q, k_cache[:, :, : position + 1], v_cache[:, :, : position + 1], enable_gqa=True
        )

    return [
        ("add out=", lambda: nt.add(x, y, out=z), lambda: torch.add(x, y, out=z)),
        ("add", lambda: nt.add(x, y), lambda: torch.add(x, y)),
        ("gelu", lambda: nt.gelu(x), lambda: F.gelu(x)),
        ("softmax", lambda: nt.softmax(s, -1), lambda: torch.softmax(s, -1)),
        (
            "rms_norm",
            lambda: nt.rms_norm(hidden, (4096,), norm, 1e-5),
            lambda: F.rms_norm(hidden, (4096,), norm, 1e-5),
        ),
        (
            "rotary q, k",
            lambda: (
                nt.rotary_position_embedding(heads_q, sin, cos, interleaved=False),
                nt.rotary_position_embedding(heads_k, sin, cos, interleaved=False),
            ),
            lambda: (rotate(heads_q, sin, cos), rotate(heads_k, sin, cos)),
        ),
        ("mm x @ W.t()", lambda: nt.mm(a, w.t()), lambda: torch.mm(a, w.t())),
        (
            "sdpa decode GQA",
            lambda: nt.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        ),
        ("sdpa decode, cache", ours_cached, torch_cached),
    ]


def rotate(x, sin, cos):
    """Rotary embedding as models write it in torch (rotate_half: pairs i, i + D/2)."""
    first, second = x.chunk(2, -1)
    sin, cos = torch.cat((sin, sin), -1)[:, None], torch.cat((cos, cos), -1)[:, None]
    return x * cos + torch.cat((-second, first), -1) * sin


def bare_us(calls=BURST, repeats=REPEATS):
    """The driver's floor: median host us per launch of bare_launch.c's no-op kernel on
    torch's current stream, launched from C, in bursts as short as the other rows' (a
    burst of 2000 filled the launch queue: 4.4 us a launch, the GPU's pace)."""
    source = pathlib.Path(__file__).with_name("bare_launch.c")
    library = pathlib.Path(tempfile.mkdtemp()) / "bare_launch.so"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"], check=True
    )
    bare = ctypes.CDLL(str(library))
    bare.bare_launch_us.restype = ctypes.c_double
    bare.bare_launch_us.argtypes = (ctypes.c_void_p, ctypes.c_int)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    samples = [bare.bare_launch_us(stream, calls) for _ in range(repeats + 1)][1:]
    if min(samples) < 0:
        raise RuntimeError(f"bare_launch.c: CUDA driver error {-int(min(samples))}")
    return statistics.median(samples)


def measure(nt):
    results = []
    floor = bare_us()
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
                 "ratio": ours / theirs, "bare_us": floor, "over_bare": ours / floor}
            )  # fmt: skip
    return results


def phases(nt, bursts=REPEATS, calls=BURST):
    """{row: [{step: mean us}, one per launch the row's call makes]}, in inference mode:
    each row called once with the runtime modules' launcher recording what it is given,
    then each launch replayed through `_C._phases` in bursts as the rows' calls are
    timed (a synchronize between: a full launch queue would time the GPU), the median
    of each step over the bursts."""
    runtime = [getattr(nt, name) for name in dir(nt) if name.startswith("_")]
    runtime = [m for m in runtime if getattr(m, "_launch", None) is nt._C.launch]
    launches = []

    def record(*args):
        launches.append(args)
        return nt._C.launch(*args)

    found = {}
    with torch.inference_mode():
        for name, ours, _ in rows(nt):
            launches.clear()
            for module in runtime:
                module._launch = record
            try:
                ours()
            finally:
                for module in runtime:
                    module._launch = nt._C.launch
            found[name] = []
            for group, *args in launches:
                nt._C._phases(group, calls, *args)  # warm
                samples = []
                for _ in range(bursts):
                    torch.cuda.synchronize()
                    samples.append(nt._C._phases(group, calls, *args))
                median = {step: statistics.median(s[step] for s in samples) for step in samples[0]}
                found[name].append({step: ns / 1000 for step, ns in median.items()})
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--phases", action="store_true", help="the launcher's steps instead")
    args = parser.parse_args()
    import ntops_prebuilt as nt

    if args.phases:
        found = phases(nt)
        for name, launches in found.items():
            for steps in launches:
                print(
                    f"{name:18s} {sum(steps.values()):6.2f} us: "
                    + " ".join(f"{step} {us:.2f}" for step, us in steps.items())
                )
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(found, indent=1))
        return
    results = measure(nt)
    print(f"bare cuLaunchKernel from C, a no-op of 4 arguments: {results[0]['bare_us']:.2f} us")
    print(
        f"{'op':18s} {'mode':10s} {'ours us':>8s} {'torch us':>9s} {'ours/torch':>10s} "
        f"{'ours/bare':>9s}"
    )
    for r in results:
        print(
            f"{r['op']:18s} {r['mode']:10s} {r['ours_us']:8.2f} {r['torch_us']:9.2f} "
            f"{r['ratio']:10.3f} {r['over_bare']:9.2f}"
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
