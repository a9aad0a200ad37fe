"""torch.compile, torch.export and CUDA graphs over ntops_prebuilt: its functions are
torch.library ops while torch traces (aot/runtime/_library.py), so a compiled decoder
layer has no graph break, an exported one runs, and both give eager's results."""

import pytest
import torch

pytestmark = pytest.mark.gpu
F = torch.nn.functional


@pytest.fixture
def layer(nt):
    """The layer benchmark's module: it imports ntops_prebuilt, which CI has not built."""
    from tests.benchmarks import bench_layer

    return bench_layer


def samples(nt):
    """(op overload, args, kwargs) for opcheck: one call of every op and overload."""
    ops = torch.ops.ntops_prebuilt
    x, y = torch.randn(64, 32, device="cuda"), torch.randn(32, device="cuda")
    h = torch.randn(4, 16, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(64, device="cuda", dtype=torch.float16)
    flags = torch.randint(0, 9, (64, 32), device="cuda", dtype=torch.int32)
    out = torch.empty_like(x)
    rows = []
    for name in ("abs", "neg", "exp", "sin", "cos", "sigmoid", "tanh"):
        rows += [(getattr(ops, name).default, (x,), {})]
        rows += [(getattr(ops, name).out, (x,), {"out": out})]
    rows += [(ops.rsqrt.default, (x.abs() + 1,), {}), (ops.bitwise_not.default, (flags,), {})]
    rows += [(ops.isnan.default, (x,), {}), (ops.isinf.default, (x,), {})]
    for name in ("add", "sub", "mul", "div", "eq", "lt", "ge"):
        packet = getattr(ops, name)
        rows += [(packet.Tensor, (x, y), {}), (packet.Scalar, (x, 2.0), {})]
        target = torch.empty(64, 32, device="cuda", dtype=torch.bool) if name in "eqltge" else out
        rows += [(packet.out, (x, y), {"out": target})]
    rows += [
        (ops.add.Tensor, (x, y), {"alpha": 2}),
        (ops.div.Scalar, (x, 3.0), {"rounding_mode": "floor"}),
        (ops.pow.Scalar, (x, 2.0), {}),
        (ops.pow.Tensor, (x.abs(), y), {}),
        (ops.bitwise_and.Scalar, (flags, 3), {}),
        (ops.bitwise_or.Tensor, (flags, flags), {}),
        (ops.clamp.default, (x, -0.5, 0.5), {}),
        (ops.relu.default, (x,), {}),
        (ops.relu_.default, (x.clone(),), {}),
        (ops.silu.default, (h,), {}),
        (ops.silu_.default, (h.clone(),), {}),
        (ops.gelu.default, (x, "tanh"), {}),
        (ops.silu_mul.default, (x, y), {}),
        (ops.silu_mul.out, (x, y), {"out": out}),
        (ops.softmax.default, (h, -1, torch.float32), {}),
        (ops.rms_norm.default, (h, [64], w, 1e-6), {}),
        (ops.layer_norm.default, (h, [64], w, w), {}),
        (ops.mm.default, (x, x.t()), {}),
        (ops.mm.out, (x.t(), x), {"out": torch.empty(32, 32, device="cuda")}),
        (ops.bmm.default, (h, h.transpose(1, 2)), {}),
        (ops.addmm.default, (y, x.t(), x), {"beta": 0.5}),
        (ops.matmul.default, (h, w[:, None].expand(64, 8)), {}),
    ]
    q = torch.randn(1, 8, 16, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.float16)
    sin = torch.randn(16, 32, device="cuda", dtype=torch.float16)
    rows += [
        (ops.scaled_dot_product_attention.default, (q, k, k),
         {"is_causal": True, "enable_gqa": True}),
        (ops.rotary_position_embedding.default, (q.transpose(1, 2), sin, sin), {}),
        (ops.rotary_position_embedding_.default, (q.transpose(1, 2).clone(), sin, sin, False), {}),
    ]  # fmt: skip
    return rows


def test_opcheck_on_every_op(nt):
    for op, args, kwargs in samples(nt):
        torch.library.opcheck(op, args, kwargs, test_utils=("test_schema", "test_faketensor"))


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
