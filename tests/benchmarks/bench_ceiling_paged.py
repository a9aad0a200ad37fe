"""Issue 28's paged prefill past Triton: the Gluon prefill over a paged cache of
ceiling_paged.py (not in the wheel), beside the wheel's paged prefill
(ntops_prebuilt.flash_attn_varlen_func over a block table) and FlashInfer's
BatchPrefillWithPagedKVCacheWrapper, in CUDA graphs, one run. Causal ragged prefills
(8 requests of 258-3041 tokens, one of 4096, 64 of 300), GQA 32/8, head_dim 128, bf16,
pages of 16 and 64 shuffled in the cache; every result checked against the wheel's.

Two steps as bench_ceiling.py's: `build` here (Triton, Gluon), `run` on the GPU (torch,
the wheel; FlashInfer where installed).

    python tests/benchmarks/bench_ceiling_paged.py build --arch sm_90 DIR
    python tests/benchmarks/bench_ceiling_paged.py run DIR [--json OUT.json]
"""

import ctypes
import functools
import json
import statistics

from bench_ceiling import Driver, cli, graph_us

PAGES = (16, 64)
CASES = {
    "8 ragged": (1834, 3041, 343, 620, 258, 2893, 728, 2069),
    "1 x 4096": (4096,),
    "64 x 300": (300,) * 64,
}
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128


def build(arch, out):
    import triton
    from ceiling_paged import paged_prefill
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import GluonASTSource

    from ntops_aot.aot.compile.cubins import quiet_teardown

    quiet_teardown()  # Triton 3.9's leak report at exit after compiling Gluon
    out.mkdir(parents=True, exist_ok=True)
    signature = dict.fromkeys(("Q", "KC", "VC", "Out"), "*bf16")
    signature |= dict.fromkeys(("cu_q", "k_lens", "table"), "*i32") | {"scale": "fp32"}
    signature |= dict.fromkeys(("batch", "total_q", "heads_q", "heads_kv"), "i32")
    signature |= dict.fromkeys(("num_pages", "pages_max"), "i32")
    signature |= dict.fromkeys(("PAGE", "D"), "constexpr")
    target = GPUTarget("cuda", int(arch.removeprefix("sm_")), 32)
    for page in PAGES:
        source = GluonASTSource(paged_prefill, signature, constexprs={"PAGE": page, "D": HEAD_DIM})
        kernel = triton.compile(source, target=target, options={"num_warps": 4})
        meta, name = kernel.metadata, f"paged-{page}"
        (out / f"{name}.cubin").write_bytes(kernel.asm["cubin"])
        facts = {"page": page, "symbol": meta.name, "warps": meta.num_warps, "shared": meta.shared}
        (out / f"{name}.json").write_text(json.dumps(facts))
        print(f"{name}: {meta.num_warps} warps, {meta.shared} bytes of shared memory")


def run(directory):
    import bench_paged_attention as paged
    import torch

    import ntops_prebuilt as nt

    try:
        import flashinfer
    except ImportError:
        flashinfer = None
    driver = Driver(directory, torch)
    workspace = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    generator = torch.Generator().manual_seed(0)
    results = {}
    for label, lengths in CASES.items():
        for page in PAGES:
            calls = _calls(
                torch, nt, flashinfer, driver, workspace, generator, paged, lengths, page
            )
            times = {name: [] for name in calls}
            for _ in range(3):
                for name, call in calls.items():
                    times[name].append(graph_us(torch, [call]))
            expected = calls["wheel"]().float()
            flops = sum(n * (n + 1) / 2 for n in lengths) * HEADS_Q * HEAD_DIM * 4
            reference = statistics.median(times.get("flashinfer", times["wheel"]))
            found = {}
            for name, call in calls.items():
                us = statistics.median(times[name])
                error = (call().float() - expected).abs().max().item()
                found[name] = (
                    round(us, 1),
                    round(flops / us / 1e6, 1),
                    round(reference / us, 3),
                    round(error, 4),
                )
                tflops, speed = found[name][1], found[name][2]
                print(
                    f"{label:9s} pages of {page:<3d} {name:11s} {us:8.1f} us {tflops:6.1f} "
                    f"TFLOPS {speed:5.2f}x err {error:.4f}",
                    flush=True,
                )
            results[f"{label}, pages of {page}"] = found
    return results


def _calls(torch, nt, flashinfer, driver, workspace, generator, paged, lengths, page):
    """{name: call returning the output} for one case."""
    total = sum(lengths)
    q = torch.randn(total, HEADS_Q, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    cu = torch.tensor(
        [0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda"
    )
    used = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    k, v, table, indptr, indices, last = paged.paged(lengths, page, generator)
    calls = {
        "wheel": functools.partial(
            nt.flash_attn_varlen_func,
            q,
            k,
            v,
            cu,
            None,
            max(lengths),
            max(lengths),
            causal=True,
            block_table=table,
            seqused_k=used,
        )
    }
    out = torch.empty_like(q)
    grid = ((total // 128 + len(lengths)) * HEADS_Q, 1, 1)
    args = [ctypes.c_uint64(t.data_ptr()) for t in (q, k, v, out, cu, used, table)]
    args += [ctypes.c_float(HEAD_DIM**-0.5)]
    sizes = (len(lengths), total, HEADS_Q, HEADS_KV, k.shape[0], table.shape[1])
    args += [ctypes.c_int32(size) for size in sizes]
    calls["gluon"] = functools.partial(driver.call, out, f"paged-{page}", grid, *args)
    if flashinfer is not None:
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        wrapper.plan(
            cu, indptr, indices, last, HEADS_Q, HEADS_KV, HEAD_DIM, page, causal=True,
            q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
        )  # fmt: skip
        calls["flashinfer"] = functools.partial(wrapper.run, q, (k, v))
    return calls


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], build, run)
