"""Issue 28's paged decode past Triton's gather: the Gluon decode of ceiling_decode.py
(TMA copies by a producer warp; not in the wheel) beside the wheel's
(ntops_prebuilt.flash_attn_with_kvcache) and FlashInfer's BatchDecodeWithPagedKVCacheWrapper,
CUDA graphs, one run; GQA 32/8, head_dim 128, bf16, pages of 16 and 64 shuffled in the
cache, bench_paged_attention's uniform (128..8192 keys) and skewed (one 32k request
among 64..512) lengths; every result checked against the wheel's.

    python tests/benchmarks/bench_ceiling_decode.py build --arch sm_90 DIR
    python tests/benchmarks/bench_ceiling_decode.py run DIR [--json OUT.json]
"""

import ctypes
import json
import os
import statistics

from bench_ceiling import Driver, cli

PAGES = (16, 64)
# (keys a block, stages) of the decode kernel
TILES = ((64, 2), (64, 3), (64, 4), (128, 2), (32, 4))
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
MAX_PARTS = 64
LEAST = 128  # keys a part takes at least


def build(arch, out):
    import triton
    from ceiling_decode import merge, paged_decode
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import GluonASTSource

    from ntops_aot.aot.compile.cubins import quiet_teardown

    quiet_teardown()
    out.mkdir(parents=True, exist_ok=True)
    target = GPUTarget("cuda", int(arch.removeprefix("sm_")), 32)
    signature = dict.fromkeys(("Q", "KC", "VC", "Out"), "*bf16")
    signature |= dict.fromkeys(("Part", "ML"), "*fp32")
    signature |= dict.fromkeys(("items", "table"), "*i32") | {"scale": "fp32"}
    signature |= dict.fromkeys(("heads_q", "heads_kv", "num_pages", "pages_max"), "i32")
    signature |= dict.fromkeys(("PAGE", "D", "BLOCK_N", "STAGES"), "constexpr")
    for page in PAGES:
        for block_n, stages in TILES:
            fixed = {"PAGE": page, "D": HEAD_DIM, "BLOCK_N": block_n, "STAGES": stages}
            source = GluonASTSource(paged_decode, signature, constexprs=fixed)
            name = f"decode-p{page}-n{block_n}s{stages}"
            try:
                kernel = triton.compile(source, target=target, options={"num_warps": 4})
            except Exception as error:
                print(f"{name}: not compiled ({str(error).splitlines()[0][:200]})")
                continue
            _write(out, name, kernel, {"kind": "decode", "page": page, "block_n": block_n})
    merge_signature = {"Out": "*bf16", "Part": "*fp32", "ML": "*fp32", "req_items": "*i32"}
    merge_signature |= {"heads_q": "i32", "heads_kv": "i32", "D": "constexpr"}
    merge_signature |= {"MAX_PARTS": "constexpr"}
    source = triton.compiler.ASTSource(
        merge, merge_signature, constexprs={"D": HEAD_DIM, "MAX_PARTS": MAX_PARTS}
    )
    kernel = triton.compile(source, target=target, options={"num_warps": 4})
    _write(out, "merge", kernel, {"kind": "merge"})


def _write(out, name, kernel, facts):
    meta = kernel.metadata
    (out / f"{name}.cubin").write_bytes(kernel.asm["cubin"])
    launch = {"symbol": meta.name, "warps": meta.num_warps, "shared": meta.shared}
    (out / f"{name}.json").write_text(json.dumps({**facts, **launch}))
    print(f"{name}: {meta.num_warps} warps, {meta.shared} bytes of shared memory", flush=True)


def plan(lengths, target, block_n):
    """FlashInfer's kind of plan: the least part size (a multiple of block_n, at least
    LEAST keys) for which the batch's parts times the heads fit `target` programs; the
    items (request, first key, end key, whole) and each request's first item."""
    least = -(-LEAST // block_n) * block_n
    longest = max(lengths)
    low, high = least, max(least, -(-longest // block_n) * block_n)
    while low < high:
        middle = (low + high) // 2 // block_n * block_n
        middle = max(middle, least)
        if sum(-(-n // middle) for n in lengths) * HEADS_KV <= target:
            high = middle
        else:
            low = middle + block_n
    chunk = low
    items, firsts = [], [0]
    for b, n in enumerate(lengths):
        parts = max(1, -(-n // chunk))
        for p in range(parts):
            items.append((b, p * chunk, min(n, (p + 1) * chunk), int(parts == 1)))
        firsts.append(len(items))
    return items, firsts, chunk


def run(directory):
    import bench_paged_attention as paged
    import flashinfer
    import torch

    driver = Driver(directory, torch)
    workspace = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    multiprocessors = torch.cuda.get_device_properties(0).multi_processor_count
    results = {}
    batches = [int(b) for b in os.environ.get("BATCHES", "1,8,64,256").split(",")]
    seeds = int(os.environ.get("SEEDS", "1"))
    for page in PAGES:
        for kind in ("uniform", "skewed"):
            for batch in batches:
                for seed in range(seeds):
                    generator = torch.Generator().manual_seed(
                        1000 * page + 10 * batch + (kind == "skewed") + 7919 * seed
                    )
                    label = f"p{page} {kind} b{batch} s{seed}"
                    results[label] = _case(
                        torch, paged, flashinfer, driver, workspace, generator, page, kind,
                        batch, multiprocessors,
                    )  # fmt: skip
    return results


def _case(torch, paged, flashinfer, driver, workspace, generator, page, kind, batch, sms):
    import ntops_prebuilt as nt

    lengths = paged.lengths_of(kind, batch, generator)
    k, v, table, indptr, indices, last = paged.paged(lengths, page, generator)
    q = torch.randn(batch, 1, HEADS_Q, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True,
        paged_kv_indptr_buffer=indptr, paged_kv_indices_buffer=indices,
        paged_kv_last_page_len_buffer=last,
    )  # fmt: skip
    wrapper.plan(
        indptr, indices, last, HEADS_Q, HEADS_KV, HEAD_DIM, page,
        q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
    )  # fmt: skip
    calls = {
        "wheel": lambda: nt.flash_attn_with_kvcache(
            q, k, v, cache_seqlens=seqlens, block_table=table
        )[:, 0],
        "flashinfer": lambda: wrapper.run(q[:, 0], (k, v)),
    }
    out = torch.empty(batch, HEADS_Q, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    for name, (function, facts) in driver.kernels.items():
        if facts.get("kind") != "decode" or facts["page"] != page:
            continue
        per_sm = ctypes.c_int()
        driver.check(driver.cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(per_sm), function, 32 * facts["warps"], facts["shared"]
        ))  # fmt: skip
        items, firsts, chunk = plan(lengths, sms * per_sm.value, facts["block_n"])
        item_tensor = torch.tensor(items, dtype=torch.int32, device="cuda").flatten()
        first_tensor = torch.tensor(firsts, dtype=torch.int32, device="cuda")
        programs = len(items) * HEADS_KV
        group = HEADS_Q // HEADS_KV
        part = torch.empty(programs * group, HEAD_DIM, dtype=torch.float32, device="cuda")
        ml = torch.empty(programs * group, 2, dtype=torch.float32, device="cuda")
        args = [ctypes.c_uint64(t.data_ptr()) for t in (q, k, v, out, part, ml, item_tensor, table)]
        args += [ctypes.c_float(HEAD_DIM**-0.5)]
        sizes = (HEADS_Q, HEADS_KV, k.shape[0], table.shape[1])
        args += [ctypes.c_int32(size) for size in sizes]
        merge_args = [ctypes.c_uint64(t.data_ptr()) for t in (out, part, ml, first_tensor)]
        merge_args += [ctypes.c_int32(HEADS_Q), ctypes.c_int32(HEADS_KV)]

        def call(
            name=name,
            args=args,
            merge_args=merge_args,
            programs=programs,
            keep=(item_tensor, first_tensor, part, ml),
        ):
            driver.call(out, name, (programs, 1, 1), *args)
            driver.call(out, "merge", (batch * HEADS_Q, 1, 1), *merge_args)
            return out

        calls[f"{name} x{per_sm.value} c{chunk}"] = call
    times = {name: [] for name in calls}
    for _ in range(3):
        for name, call in calls.items():
            times[name].append(paged.graph_us(call))
    expected = calls["wheel"]().float()
    reference = statistics.median(times["flashinfer"])
    bytes_read = 2 * sum(lengths) * HEADS_KV * HEAD_DIM * 2
    found = {}
    for name, call in calls.items():
        us = statistics.median(times[name])
        error = (call().float() - expected).abs().max().item()
        found[name] = (
            round(us, 1),
            round(reference / us, 3),
            round(bytes_read / us / 1e3),
            round(error, 4),
        )
        print(f"p{page} {kind:7s} b{batch:<3d} {name:34s} {us:8.1f} us {reference / us:5.2f}x "
              f"{bytes_read / us / 1e3:6.0f} GB/s err {error:.4f}", flush=True)  # fmt: skip
    return found


if __name__ == "__main__":
    cli(__doc__.splitlines()[0], build, run)
