"""What this Triton can reach on the wheel's two hottest kernels, against the wheel and
torch (issue 29's "Triton's ceiling"): plain Triton kernels (ceiling_kernels.py) compiled
ahead of time like the wheel's, launched through the CUDA driver, timed beside
ntops_prebuilt and torch (cuBLAS; torch's own attention) in one run.

Two steps, as the wheel's: `build` on the build machine (Triton, no GPU) writes each
configuration's cubin and launch facts into DIR; `run` on the GPU machine (torch, the
wheel if installed; no Triton) loads them with cuModuleLoadData and times them in CUDA
graphs: attention as flash attention's prefill (bf16, head_dim 128; 2048 tokens of 32
heads over 8, 4096 tokens, 4 x 4096 of 32 heads, causal and not), products as x @ W.t()
in the nn.Linear layout at 96-256 rows on Llama-3-8B's, Qwen2.5-7B's and Llama-3.2-1B's
projections, the weights rotating among copies over 256 MiB (each call reads its weight
from HBM, as bench_products.py's do). Speed = torch's time / the kernel's.

    python tests/benchmarks/bench_ceiling.py build --arch sm_90 DIR
    python tests/benchmarks/bench_ceiling.py run DIR [--json OUT.json]
"""

import argparse
import ctypes
import functools
import json
import pathlib
import statistics

# (block_m, block_n, warps, stages, causal, warp-specialised): the wheel's prefill tile
# (64 x 64, 4 warps, 3 stages), the tutorial's Hopper tile, Triton's Hopper warp
# specialisation (4 warps a consumer group: 12 warps in all).
ATTENTION = (
    (64, 64, 4, 3, 1, 0),
    (128, 128, 8, 3, 1, 0),
    (128, 128, 4, 2, 2, 1),
    (64, 64, 4, 3, 0, 0),
    (128, 128, 8, 3, 0, 0),
    (128, 128, 4, 2, 0, 1),
)
# (bm, bn, bk, warps, stages, swapped, warp-specialised)
LINEAR = (
    (64, 128, 64, 4, 4, 0, 0),
    (128, 64, 64, 4, 5, 0, 0),
    (128, 128, 64, 4, 4, 0, 0),
    (128, 256, 64, 8, 3, 0, 0),
    (128, 128, 64, 4, 4, 0, 1),
    (128, 256, 64, 4, 3, 0, 1),
    (128, 64, 64, 4, 5, 1, 0),
    (64, 64, 128, 4, 4, 1, 0),
    (128, 128, 64, 4, 4, 1, 0),
    (128, 256, 64, 4, 3, 1, 1),
)
# (label, batch, heads_q, heads_kv, tokens)
PREFILLS = (("1x2048 32/8", 1, 32, 8, 2048), ("1x4096 32/8", 1, 32, 8, 4096),
            ("4x4096 32/32", 4, 32, 32, 4096))  # fmt: skip
# (label, K, N): the MLPs' up projections, Llama's fused gate/up, down and QKV
PRODUCTS = (("Llama-3-8B up", 4096, 14336), ("Qwen2.5-7B up", 3584, 18944),
            ("Llama-3.2-1B up", 2048, 8192), ("Llama-3-8B gate/up", 4096, 28672),
            ("Llama-3-8B down", 14336, 4096), ("Llama-3-8B qkv", 4096, 6144))  # fmt: skip
ROWS = (96, 128, 192, 256)


def build(arch, out):
    """Compile every configuration for `arch` into `out`: NAME.cubin and NAME.json."""
    import triton
    from ceiling_kernels import attention, linear
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", int(arch.removeprefix("sm_")), 32)
    out.mkdir(parents=True, exist_ok=True)
    pointers = dict.fromkeys(("Q", "K", "V", "Out"), "*bf16")
    for bm, bn, warps, stages, causal, ws in ATTENTION:
        name = f"attention-{'causal' if causal else 'full'}-{bm}x{bn}-w{warps}s{stages}"
        signature = {**pointers, "sm_scale": "fp32", "HQ": "i32", "HKV": "i32", "N": "i32"}
        fixed = {"BLOCK_M": bm, "BLOCK_N": bn, "D": 128, "CAUSAL": causal, "WS": bool(ws)}
        _compile(triton, attention, signature, fixed, name + ("-ws" if ws else ""), target,
                 warps, stages, out, {"kind": "attention", "bm": bm, "causal": causal})  # fmt: skip
    for bm, bn, bk, warps, stages, swap, ws in LINEAR:
        name = f"linear-{'swap-' if swap else ''}{bm}x{bn}x{bk}-w{warps}s{stages}"
        signature = {"X": "*bf16", "W": "*bf16", "Y": "*bf16", "M": "i32", "N": "i32", "K": "i32"}
        fixed = {"BM": bm, "BN": bn, "BK": bk, "GROUP": 8, "SWAP": bool(swap), "WS": bool(ws)}
        _compile(triton, linear, signature, fixed, name + ("-ws" if ws else ""), target, warps,
                 stages, out, {"kind": "linear", "bm": bm, "bn": bn, "swap": swap})  # fmt: skip


def _compile(triton, function, signature, fixed, name, target, warps, stages, out, facts):
    signature = {**signature, **dict.fromkeys(fixed, "constexpr")}
    source = triton.compiler.ASTSource(function, signature, constexprs=fixed)
    try:
        kernel = triton.compile(
            source, target=target, options={"num_warps": warps, "num_stages": stages}
        )
    except Exception as error:  # a configuration this Triton cannot compile is a finding
        print(f"{name}: not compiled ({str(error).splitlines()[0][:120]})")
        return
    meta = kernel.metadata
    (out / f"{name}.cubin").write_bytes(kernel.asm["cubin"])
    launch = {"symbol": meta.name, "warps": meta.num_warps, "shared": meta.shared}
    (out / f"{name}.json").write_text(json.dumps({**facts, **launch}))
    print(f"{name}: {meta.num_warps} warps, {meta.shared} bytes of shared memory")


class Driver:
    """The cubins of a `build`, loaded into torch's context and launched on its stream."""

    def __init__(self, directory, torch):
        self.torch = torch
        self.cuda = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")  # torch's context, current
        self.kernels = {}
        for path in sorted(directory.glob("*.json")):
            facts = json.loads(path.read_text())
            module, function = ctypes.c_void_p(), ctypes.c_void_p()
            self.check(
                self.cuda.cuModuleLoadData(
                    ctypes.byref(module), path.with_suffix(".cubin").read_bytes()
                )
            )
            self.check(
                self.cuda.cuModuleGetFunction(
                    ctypes.byref(function), module, facts["symbol"].encode()
                )
            )
            # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self.check(self.cuda.cuFuncSetAttribute(function, 8, facts["shared"]))
            self.kernels[path.stem] = (function, facts)
        # Triton's global scratch (the device-made TMA descriptors), per program
        self.scratch = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")

    @staticmethod
    def check(result):
        if result != 0:
            raise RuntimeError(f"CUDA driver error {result}")

    def call(self, result, name, grid, *args):
        """Launch kernel `name` over `grid` with `args` (ctypes values); `result`."""
        function, facts = self.kernels[name]
        values = [*args, ctypes.c_uint64(self.scratch.data_ptr()), ctypes.c_uint64(0)]
        params = (ctypes.c_void_p * len(values))(
            *[ctypes.cast(ctypes.pointer(value), ctypes.c_void_p) for value in values]
        )
        stream = ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream)
        self.check(self.cuda.cuLaunchKernel(
            function, *grid, 32 * facts["warps"], 1, 1, facts["shared"], stream, params, None
        ))  # fmt: skip
        return result


def graph_us(torch, calls, repeats=7):
    """Device us per call of a CUDA graph replaying `calls` (one each) back to back."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / len(calls))
    return statistics.median(times)


def compare(torch, candidates, reference, taking=3):
    """{name: (us, speed vs `reference`, max abs error vs reference's result)}, taking
    turns `taking` times; `candidates`: {name: (calls, result of one call)}."""
    times = {name: [] for name in candidates}
    for _ in range(taking):
        for name, (calls, _) in candidates.items():
            times[name].append(graph_us(torch, calls))
    expected = candidates[reference][1]().float()
    base = statistics.median(times[reference])
    found = {}
    for name, (_, result) in candidates.items():
        us = statistics.median(times[name])
        error = (result().float() - expected).abs().max().item()
        found[name] = (round(us, 2), round(base / us, 3), round(error, 4))
    return found


def run_attention(torch, driver, nt):
    results = {}
    for causal in (True, False):
        for label, batch, heads_q, heads_kv, tokens in PREFILLS:
            case = f"{'causal' if causal else 'full'} {label}"
            results[case] = _attention_case(
                torch, driver, nt, causal, batch, heads_q, heads_kv, tokens
            )
            _print(case, results[case])
    return results


def _attention_case(torch, driver, nt, causal, batch, heads_q, heads_kv, tokens):
    import torch.nn.functional as F

    q = torch.randn(batch, heads_q, tokens, 128, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(batch, heads_kv, tokens, 128, dtype=torch.bfloat16, device="cuda")
    v, out = torch.randn_like(k), torch.empty_like(q)
    gqa = heads_q != heads_kv
    torch_call = functools.partial(
        F.scaled_dot_product_attention, q, k, v, is_causal=causal, enable_gqa=gqa
    )
    candidates = {"torch": ([torch_call], torch_call)}
    if nt is not None:
        ours = functools.partial(
            nt.scaled_dot_product_attention, q, k, v, is_causal=causal, enable_gqa=gqa
        )
        candidates["ntops_prebuilt"] = ([ours], ours)
    pointers = [ctypes.c_uint64(t.data_ptr()) for t in (q, k, v, out)]
    sizes = [ctypes.c_int32(n) for n in (heads_q, heads_kv, tokens)]
    for name, (_, facts) in driver.kernels.items():
        if facts["kind"] != "attention" or bool(facts["causal"]) != causal:
            continue
        grid = (tokens // facts["bm"], batch * heads_q, 1)
        call = functools.partial(
            driver.call, out, name, grid, *pointers, ctypes.c_float(128**-0.5), *sizes
        )
        candidates[name] = ([call], call)
    return compare(torch, candidates, "torch")


def run_linear(torch, driver, nt):
    results = {}
    for label, k_dim, n_dim in PRODUCTS:
        copies = max(1, 256 * 2**20 // (2 * k_dim * n_dim))
        weights = [
            torch.randn(n_dim, k_dim, dtype=torch.bfloat16, device="cuda") / k_dim**0.5
            for _ in range(copies)
        ]
        for rows in ROWS:
            case = f"{label} {k_dim}->{n_dim} rows {rows}"
            results[case] = _linear_case(torch, driver, nt, weights, rows)
            _print(case, results[case])
    return results


def _linear_case(torch, driver, nt, weights, rows):
    import torch.nn.functional as F

    n_dim, k_dim = weights[0].shape
    x = torch.randn(rows, k_dim, dtype=torch.bfloat16, device="cuda")
    y = torch.empty(rows, n_dim, dtype=torch.bfloat16, device="cuda")
    calls = [functools.partial(F.linear, x, w) for w in weights]
    candidates = {"cuBLAS": (calls, calls[0])}
    if nt is not None:
        calls = [functools.partial(nt.mm, x, w.t()) for w in weights]
        candidates["ntops_prebuilt"] = (calls, calls[0])
    sizes = [ctypes.c_int32(n) for n in (rows, n_dim, k_dim)]
    for name, (_, facts) in driver.kernels.items():
        if facts["kind"] != "linear":
            continue
        tiles_r = -(-(n_dim if facts["swap"] else rows) // facts["bm"])
        tiles_c = -(-(rows if facts["swap"] else n_dim) // facts["bn"])
        calls = [
            functools.partial(
                driver.call,
                y,
                name,
                (tiles_r * tiles_c, 1, 1),
                ctypes.c_uint64(x.data_ptr()),
                ctypes.c_uint64(w.data_ptr()),
                ctypes.c_uint64(y.data_ptr()),
                *sizes,
            )
            for w in weights
        ]
        candidates[name] = (calls, calls[0])
    return compare(torch, candidates, "cuBLAS")


def _print(case, found):
    ranked = sorted(found.items(), key=lambda item: -item[1][1])
    print(case)
    for name, (us, speed, error) in ranked:
        print(f"    {name:40s} {us:9.1f} us {speed:6.2f}x  err {error:.3f}")


def run(directory):
    """Every configuration of a `build` in `directory`, timed: {"gpu", "attention", "linear"}."""
    import torch

    try:
        import ntops_prebuilt as nt
    except ImportError:
        nt = None
    driver = Driver(directory, torch)
    return {
        "gpu": torch.cuda.get_device_name(),
        "attention": run_attention(torch, driver, nt),
        "linear": run_linear(torch, driver, nt),
    }


def cli(description, build, run):
    """The two steps' command line, this file's and bench_ceiling_paged.py's: `build DIR
    [--arch]` on the build machine, `run DIR [--json OUT]` on the GPU."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("step", choices=("build", "run"))
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--json")
    options = parser.parse_args()
    if options.step == "build":
        build(options.arch, options.directory)
        return
    results = run(options.directory)
    if options.json:
        pathlib.Path(options.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], build, run)
