"""How kernels are built: a folder per stage, each stage a function of the last one's
data, and only the last one writing outside the cache.

1. declare/   what kernel files say (`VariantSpace`, `Api`, `Tuning`), the op registry
              found by scanning `ntops_aot.kernels`, every declaration checked on load
2. plan/      options -> a `Plan`: the variants, their configurations and cache keys
3. compile/   a `Plan` -> its `Compiled` kernels: ninetoothed's code generation, then
              Triton, in worker processes, through the store
4. package/   a `Plan` and its `Compiled` -> the wheel(s) (or a shard file): the launcher
              rendered and compiled, the manifest, the runtime's generated Python

Beside the stages: store/ (the content-addressed cache and its keys), toolchain/
(ninetoothed and Triton loaded for a target, and their versions), config.py (the
options, layered once), errors.py (one exception per kind of failure). build.py runs
stages 2-4; merge.py runs stage 4 on the union of shard files. csrc/ (the launcher's
C), templates/ (everything generated) and runtime/ (the wheel's hand-written Python)
are data that stage 4 ships.
"""
