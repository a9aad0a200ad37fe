"""Every declared function is in every suite, as PyTorch's OpInfo database keeps its ops:
the suites iterate the kernel files' declarations (`API`), and the one test here fails,
naming the function and the suite, where one is absent. Adding an ordinary op is
writing its kernel file; a composite op (a hand-written runtime wrapper) adds its
module in tests/ops/ (its input maker, fuzz spec and interpreted check), and nothing
else in tests/."""

import copy

from tests import calls as generated
from tests.gpu import fuzz_ops
from tests.gpu.test_compile import opcheck_calls
from tests.ops import makers
from tests.unit import test_interpreted


def _declared(registry):
    apis = [api for op in registry.values() for api in op.apis()]
    dtypes = {name: list(op.space.dtypes) for name, op in registry.items()}
    return apis, dtypes


def absences(apis, dtypes):
    """(function, suite, what to do) for each declared function of `apis` (with its
    op's `dtypes`) that a suite leaves out."""
    composite = {api["op"] for api in apis if api["wrapper"] is not None}
    fake = {call.name for call in generated.calls(apis, dtypes, generated.LAYOUTS)}
    opcheck = {call.name for call in opcheck_calls(apis, dtypes)}
    fuzzed = set(fuzz_ops.HAND) | set(fuzz_ops.declared_specs(apis, dtypes))
    # the interpreted tests: an ordinary op's kernel from its declaration
    # (test_ordinary_ops), a composite op's by hand, or left to the GPU
    interpreted = {api["op"] for api in apis if api["wrapper"] is None}
    interpreted |= {op for ops in test_interpreted.covered().values() for op in ops}
    interpreted |= set(test_interpreted.LEFT_TO_THE_GPU)
    own = "declare samples in its API, or add calls(name, dtype) to tests/ops/{op}.py"
    found = []
    for api in apis:
        name, op = api["name"], api["op"]
        maker = makers().get(op)
        laid_out = op not in composite or all(
            callable(getattr(maker, part, None)) for part in ("num_tensors", "run")
        )
        for suite, covered, fix in [
            ("tests/gpu/test_ops.py", bool(api["samples"]), "declare samples in its API"),
            ("the fake-tensor check (tests/unit/test_library.py)", name in fake, own),
            ("opcheck (tests/gpu/test_compile.py)", name in opcheck, own),
            (
                "tests/gpu/test_every_kernel.py",
                laid_out,
                "a composite op needs tests/ops/{op}.py with num_tensors(variant) and "
                "run(nt, variant, spec, dtype, bucket): see tests/ops/__init__.py",
            ),
            (
                "the fuzz (tests/gpu/fuzz_ops.py)",
                name in fuzzed,
                "a composite op needs fuzz_spec() in tests/ops/{op}.py (an ordinary op's "
                "is drawn from its declaration)",
            ),
            (
                "tests/unit/test_interpreted.py",
                op in interpreted,
                "a composite op's kernel runs in interpreted(make) in tests/ops/{op}.py (or "
                "a check there naming it), or is listed in LEFT_TO_THE_GPU with the reason",
            ),
        ]:
            if not covered:
                found.append((name, suite, fix.format(op=op)))
    return found


def test_every_declared_function_is_in_every_suite(registry):
    apis, dtypes = _declared(registry)
    found = absences(apis, dtypes)
    assert not found, "\n".join(
        f"{name} is absent from {suite}: {fix}" for name, suite, fix in found
    )


def test_an_op_absent_from_the_suites_is_named_with_each_of_them(registry):
    """A new composite op with no samples, no tests/ops module, no fuzz spec and no
    interpreted check: the test above would name it once per suite."""
    apis, dtypes = _declared(registry)
    new = copy.deepcopy(next(api for api in apis if api["name"] == "elu"))
    new.update(name="swish", op="swish", wrapper="_swish", samples=[])
    found = absences([*apis, new], {**dtypes, "swish": ["fp16"]})
    assert {name for name, _, _ in found} == {"swish"}
    assert len(found) == 6, found
    ordinary = {**new, "wrapper": None, "samples": copy.deepcopy(apis[0]["samples"][:1])}
    ordinary["samples"][0]["values"] = {"input": [6, 42, 123]}
    ordinary["samples"][0]["shapes"] = ["input"]
    # an ordinary op's every suite comes from its declaration
    assert not absences([*apis, ordinary], {**dtypes, "swish": ["fp16"]})


def test_the_tests_name_only_declared_ops(registry):
    """tests/ops modules, the fuzz's hand specs, the interpreted tests' lists and the
    runtime bugs the calls expect name declared functions and ops, one to one."""
    apis, _ = _declared(registry)
    names = {api["name"] for api in apis}
    composite = {api["op"] for api in apis if api["wrapper"] is not None}
    assert set(makers()) <= composite, sorted(set(makers()) - composite)
    assert set(fuzz_ops.HAND) <= names, sorted(set(fuzz_ops.HAND) - names)
    assert set(generated.KNOWN) <= names, sorted(set(generated.KNOWN) - names)
    run = {op for ops in test_interpreted.covered().values() for op in ops}
    left = set(test_interpreted.LEFT_TO_THE_GPU)
    assert run | left <= set(registry), sorted((run | left) - set(registry))
    assert not run & left, f"both run and left to the GPU: {sorted(run & left)}"


def test_every_kernels_makers_count_their_kernels_tensors(registry):
    """A kernel spec's unit dims are per tensor argument: tests/ops's num_tensors(variant)
    is the number of the kernel's tensors, for every switch and ndim."""
    from ntops_aot.aot.declare.registry import every_variant
    from ntops_aot.aot.declare.space import ALL

    for op, module in makers().items():
        definition = registry[op]
        seen = set()
        for variant in every_variant(op, definition.space):
            key = (variant.ndim, variant.switches)
            if key in seen:
                continue  # the tensors are the same in every dtype and arch
            seen.add(key)
            bucket = definition.tuning.names[0] if definition.tuning else ALL
            config = definition.config(variant, bucket)
            args = definition.arguments(variant, config)
            described = {
                "op": op,
                "id": variant.id,
                "ndim": variant.ndim,
                "dtype": variant.dtype,
                "switches": dict(variant.switches),
            }
            expected = sum(arg.is_tensor for arg in args)
            assert module.num_tensors(described) == expected, (variant.id, expected)
