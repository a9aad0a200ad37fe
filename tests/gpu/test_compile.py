"""torch.compile, torch.export and CUDA graphs over ntops_prebuilt: its functions are
torch.library ops while torch traces (aot/runtime/_library.py), so a compiled decoder
layer has no graph break, an exported one runs, and both give eager's results."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from tests import calls as generated
from tests.gpu.layouts import values

pytestmark = pytest.mark.gpu
F = torch.nn.functional
NAMESPACE = "ntops_prebuilt"
TEST_UTILS = ("test_schema", "test_faketensor")
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _test_utils(args, kwargs):
    """opcheck's tests for a call: test_schema compares the arguments before and after
    with torch ops that FP8 tensors lack ("mul_cuda" not implemented for
    'Float8_e4m3fn', torch 2.11), so an FP8 call checks its fake only."""
    tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
    if any(tensor.dtype in FP8 for tensor in tensors):
        return ("test_faketensor",)
    return TEST_UTILS


@pytest.fixture
def layer(nt):
    """The layer benchmark's module: it imports ntops_prebuilt, which CI has not built."""
    from tests.benchmarks import bench_layer

    return bench_layer


def opcheck_calls(apis, dtypes):
    """The calls opcheck starts from: every declared function's (tests/calls.py: its
    samples as they are, with out= and in place, and its tests/ops module's), for
    `apis` (declarations, as `_ops.APIS` has them) in `dtypes` (per op, the manifest's
    names built). A plain function: a unit test runs it on the kernel files'
    declarations."""
    return generated.calls(apis, dtypes)


def overloads(api):
    """The overloads `api` declares, as the ops' names print ("add.Scalar_out",
    "relu_.default")."""
    name = api["name"]
    return {
        f"{name}_.default" if overload["writes"] == "inplace" else f"{name}.{overload['name']}"
        for overload in api["overloads"]
    }


class Recorder(TorchDispatchMode):
    """Records every ntops_prebuilt op a call reaches: (op, args, kwargs), its tensor
    arguments cloned as they were before it ran (in-place and out= overloads write
    them)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == NAMESPACE:
            self.seen.append((func, *tree_map(_clone, (args, kwargs))))
        return func(*args, **kwargs)


def _clone(value):
    return value.clone() if isinstance(value, torch.Tensor) else value


def reached(nt, call, make):
    """The ntops_prebuilt ops `call` reaches as torch.compile would make it (its traced
    route), on tensors from `make`: [(op, args, kwargs)], and what the call raised
    (None)."""
    args, kwargs = call.arguments(make)
    with Recorder() as recorder:
        try:
            nt._library.traced(call.name)(*args, **kwargs)
        except Exception as error:
            return recorder.seen, error
    return recorder.seen, None


def _cuda(shape, dtype, *, strides=None, domain=None, bound=None):
    """Random CUDA tensors for a call (tests/calls.Make), in any layout (a stride of 0
    too: the values fill the storage the strides span)."""
    if bound is not None:
        return torch.randint(0, bound, tuple(shape), device="cuda")
    strides = strides or generated.contiguous(shape)
    span = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True))
    flat = values((span if all(shape) else 0,), dtype, domain)
    return flat.as_strided(tuple(shape), tuple(strides))


def _built(nt):
    """Per op, the dtypes the wheel has kernels for."""
    built = {}
    for variant in nt.manifest()["variants"]:
        if variant["kernels"]:
            built.setdefault(variant["op"], set()).add(variant["dtype"])
    return {op: sorted(dtypes) for op, dtypes in built.items()}


def test_opcheck_on_every_overload_the_declared_calls_reach(nt):
    """Each declared call runs as torch.compile would run it, and every ntops_prebuilt
    op it reaches passes opcheck (schema, fake against real); every overload a function
    declares is reached by one of its calls."""
    problems, seen = [], set()
    calls = opcheck_calls(nt._ops.APIS, _built(nt))
    for call in calls:
        ops, error = reached(nt, call, _cuda)
        if error is not None:
            problems.append((call.name, f"{call.label}: the traced call raised {error!r}"[:500]))
        elif not ops:
            problems.append((call.name, f"{call.label}: reached no ntops_prebuilt op"))
        for op, args, kwargs in ops:
            seen.add(str(op).removeprefix(f"{NAMESPACE}."))
            try:
                torch.library.opcheck(op, args, kwargs, test_utils=_test_utils(args, kwargs))
            except Exception as failure:
                first = " ".join(str(failure).strip().splitlines()[:3])
                problems.append((call.name, f"{call.label}: opcheck of {op}: {first}"[:800]))
    called = {call.name for call in calls}
    for api in nt._ops.APIS:
        missing = sorted(overloads(api) - seen) if api["name"] in called else []
        problems += [(api["name"], f"no declared call reaches {name}") for name in missing]
    known = {name for name, _ in problems if name in generated.KNOWN}
    fixed = sorted((set(generated.KNOWN) & called) - known)
    assert not fixed, f"fixed: remove {fixed} from tests/calls.py's KNOWN"
    problems = [problem for name, problem in problems if name not in generated.KNOWN]
    assert not problems, "\n".join(problems)


def decode(layer):
    """A Llama-3-8B layer's decode step (batch 1, 255 cached positions)."""
    weights = layer.make_weights()
    step = layer.make_step(layer.Scenario(batch=1, tokens=1, cache_len=255))
    return weights, step


def test_the_decoder_layer_compiles_without_a_graph_break_and_matches_eager(nt, layer):
    weights, step = decode(layer)
    expected = layer.ntops_layer(nt, weights, step.with_own_cache())
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda s: layer.ntops_layer(nt, weights, s))(
        step.with_own_cache()
    )
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(lambda s: layer.ntops_layer(nt, weights, s), fullgraph=True)
    mine = step.with_own_cache()
    got = compiled(mine)
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    # The compiled step wrote the cache as eager did: the new entries are in it
    written = step.with_own_cache()
    layer.ntops_layer(nt, weights, written)
    torch.testing.assert_close(mine.k_cache, written.k_cache)


def test_the_compiled_layer_replays_in_cuda_graphs(nt, layer):
    weights, step = decode(layer)
    expected = layer.ntops_layer(nt, weights, step.with_own_cache())
    torch._dynamo.reset()
    overhead = torch.compile(
        lambda s: layer.ntops_layer(nt, weights, s), mode="reduce-overhead", fullgraph=True
    )
    for _ in range(3):  # warm-up runs, then the recorded graph replays
        got = overhead(step.with_own_cache())
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    compiled = torch.compile(lambda s: layer.ntops_layer(nt, weights, s), fullgraph=True)
    mine = step.with_own_cache()
    compiled(mine)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = compiled(mine)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, expected, rtol=2e-2, atol=2e-2)


class Prefill(torch.nn.Module):
    def __init__(self, nt, layer, weights):
        super().__init__()
        self.nt, self.layer, self.weights = nt, layer, weights

    def forward(self, x, sin, cos):
        step = self.layer.Step(x, (sin, cos), None, None, None, 0)
        return self.layer.ntops_layer(self.nt, self.weights, step)


def test_an_exported_prefill_layer_runs_and_matches_eager(nt, layer):
    weights = layer.make_weights()
    step = layer.make_step(layer.Scenario(batch=1, tokens=64, cache_len=0))
    module = Prefill(nt, layer, weights)
    args = (step.x, *step.rope_half)
    expected = module(*args)
    exported = torch.export.export(module, args)
    names = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert any(name.startswith("ntops_prebuilt.") for name in names), names
    torch.testing.assert_close(exported.module()(*args), expected, rtol=2e-2, atol=2e-2)
