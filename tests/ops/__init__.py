"""A composite op's test-side knowledge, beside nothing else: one module per op.

An ordinary op's tests come from its kernel file's declaration (`API`: signature,
samples, tolerance). A composite op (its function has a hand-written runtime
`wrapper`) keeps here what no declaration can say, in tests/ops/<op>.py:

- `OPS`: the ops (kernel files) it serves, by default the module's own name;
- `num_tensors(variant)`: the tensors its kernels take, the output included (a
  kernel spec's `u...` has one digit per tensor);
- `run(nt, variant, spec, dtype, bucket)`: the public function called on inputs laid
  out for the kernel `spec` (tests/gpu/layouts.Spec) of the bucket's sizes, and
  torch's answer: `(result, reference)` (tests/gpu/test_every_kernel.py);
- `check(result, reference, variant, dtype)`, optional: where the comparison is not
  tests/tolerances.py's (a product's error norm);
- `calls(name, dtype)`, optional: calls of function `name` (tests/calls.Call) for
  the fake-tensor check and opcheck that its declared samples cannot express.
- `fuzz_spec()`: its fuzz spec (tests/gpu/fuzz_ops.Spec: how to draw a random call),
  where tests/gpu/fuzz_ops.HAND does not already hold one (the older ops' live there);
  or `fuzz_specs()`, by function, where its kernels serve several (max and argmax).

Modules are found by scanning this folder (never a hand list); a unit test fails for
a composite op without one (tests/unit/test_coverage.py).
"""

import functools
import importlib
import pkgutil
from types import ModuleType


@functools.cache
def makers() -> dict[str, ModuleType]:
    """Every module of this package, by the ops it serves."""
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for op in getattr(module, "OPS", (info.name,)):
            if op in found:
                raise ValueError(
                    f"tests/ops: {op} has two modules, {found[op].__name__} and {info.name}"
                )
            found[op] = module
    return found
