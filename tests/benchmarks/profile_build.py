"""Where a variant's build time goes, on the CPU: ninetoothed's code generation, then
per specialisation Triton's frontend (Python source -> TTIR), its TTIR and TTGIR passes,
the lowering to LLVM IR, LLVM's PTX code generation and ptxas (cubin), as Triton's own
compile listener times them (`triton.knobs.compilation.listener`).

Every kernel compiles afresh (Triton's cache is bypassed), one variant at a time in
this process, so the figures are one core's. Example:

    python tests/benchmarks/profile_build.py --arch sm_90 \
        --variants 'add-sm_90-fp16-nd2-*' 'mm-sm_90-bf16-*' --json profile.json
"""

import argparse
import collections
import dataclasses
import json
import pathlib
import tempfile
import time

from ntops_aot.aot.compile import codegen
from ntops_aot.aot.compile.cubins import compile_kernel
from ntops_aot.aot.compile.variant import selector
from ntops_aot.aot.config import BuildOptions
from ntops_aot.aot.declare import registry
from ntops_aot.aot.plan.stage import plan
from ntops_aot.aot.toolchain.compilers import Toolchain

STAGES = ("frontend", "ttir", "ttgir", "llir", "ptx", "cubin")


def profile(variant, builds, options, toolchain, per_kernel=False):
    """{stage: seconds} of one variant, its code generation as "codegen", summed over
    its specialisations, and how many kernels it compiled."""
    import triton

    spent = collections.Counter()
    op = registry.load(variant.op, toolchain)
    kernels = 0

    def listen(*, times, cache_hit, **_):
        assert not cache_hit, "Triton's cache answered: the profile needs fresh compiles"
        spent["frontend"] += times.ir_initialization / 1e6
        for stage, micros in times.lowering_stages:
            spent[stage] += micros / 1e6

    with triton.knobs.compilation.scope():
        triton.knobs.compilation.listener = listen
        triton.knobs.compilation.always_compile = True
        for build in builds:
            config = dataclasses.replace(
                build.config,
                num_warps=options.num_warps or build.config.num_warps,
                num_stages=options.num_stages or build.config.num_stages,
            )
            start = time.perf_counter()
            generated = codegen.generate(toolchain, op, variant, config, keep=selector(build))
            spent["codegen"] += time.perf_counter() - start
            for kernel in generated:
                before = sum(v for k, v in spent.items() if k != "codegen")
                compile_kernel(toolchain, kernel)
                kernels += 1
                if per_kernel:
                    after = sum(v for k, v in spent.items() if k != "codegen")
                    print(f"  {kernel.id:70s} {after - before:6.2f} s", flush=True)
    return spent, kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--variants", nargs="+", required=True, help="globs over variant ids")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--per-kernel", action="store_true", help="print each kernel's time")
    args = parser.parse_args()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="ntops-aot-profile-"))
    options = BuildOptions(
        arches=(args.arch,), variants=tuple(args.variants), build_dir=scratch, jobs=1
    )
    planned = plan(options)
    toolchain = Toolchain(scratch / "toolchain")
    rows = []
    print(f"{'variant':60s} {'kernels':>7s} " + " ".join(f"{s:>8s}" for s in ("codegen", *STAGES)))
    for variant in planned.variants:
        spent, kernels = profile(
            variant, planned.builds[variant.id], options, toolchain, args.per_kernel
        )
        rows.append({"variant": variant.id, "kernels": kernels, **dict(spent)})
        figures = " ".join(f"{spent[s]:8.2f}" for s in ("codegen", *STAGES))
        print(f"{variant.id:60s} {kernels:7d} {figures}", flush=True)
    total = collections.Counter()
    for row in rows:
        total.update({k: v for k, v in row.items() if k not in ("variant", "kernels")})
    whole = sum(total.values())
    print("share of the time: " + ", ".join(
        f"{s} {100 * total[s] / whole:.0f}%" for s in ("codegen", *STAGES)
    ))  # fmt: skip
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
