"""`make bench-layer-fp8`: the Llama-3-8B decoder layer with FP8 weights and an FP8
(float8_e4m3fn) KV cache (issue 31, item 4), on bench_layer.py's weights and inputs:
decode at batch 1, 8, 64 and 256 over 4096 cached positions, and a 2048-token prefill.

- ntops fp8 row-wise: weights per output channel, activations per token
  (rms_norm_quant_fp8, scaled_fp8_quant, silu_mul_quant_fp8), scaled_mm; ntops fp8
  block: 128 x 128 weight blocks, 1 x 128 activation groups, w8a8_block_fp8_matmul.
  Both attend the dense FP8 cache with flash_attn_with_kvcache (which quantizes the new
  keys and values into it in the same launch); residuals by nt.add. Eager and in a graph.
- ntops bf16: bench_layer.py's layer, its bf16 cache holding the FP8 cache's values.
- torch fp8: the same math in torch ops (amax / 448 dynamic quantization,
  torch._scaled_mm with use_fast_accum=False, the new entries quantized into the FP8
  cache by index assignment, the attended cache dequantized to bf16 for
  F.scaled_dot_product_attention): row-wise eager; row-wise and per tensor under
  torch.compile (default mode, dynamic=False), alone and in a graph.
- torch.compile bf16: bench_layer.py's torch layer, alone and in a graph.

The goal: our FP8 batch-1 decode in a graph at most 0.6x torch.compile's bf16 layer in a
graph (the HBM roofs' ratio is about 0.5; a decode's roof is the least bytes it moves
over the device's HBM bandwidth). Every output is first checked against the layer in
float32 from the unquantized bf16 weights over the FP8 cache's dequantized values (the
cache's quantization is an input, not counted again as an error). Timing and graphs are
bench_layer.py's (`measure`, `captured`). torch.compile imports Triton, which this
process must not: the torch columns come from a child (this script, --compiled-worker).

    cd tests/benchmarks && python bench_layer_fp8.py [--quick] [--scenarios a,b] [--json OUT]
"""

import argparse
import dataclasses
import functools
import json
import math
import subprocess
import sys

import bench_layer as layer
import torch
from bench_layer import BF16, LLAMA_8B, F

E4M3, E4M3_MAX, BLOCK = torch.float8_e4m3fn, 448.0, 128
# The FP8 cache's scale, a power of two: randn * 64 is exact in bf16 (its rounding to e4m3
# the only one), the dequantized cache is exact in bf16 (the bf16 layers attend the very
# values the FP8 ones do), and 448 / 64 = 7 standard deviations fit.
FP8_CACHE_SCALE = 2.0**-6
# Relative Frobenius error against the float32 layer. e4m3 keeps 3 mantissa bits: a
# value's rounding is at most 2^-4 of it (2.6% RMS over these weights); a product of
# random-signed terms keeps its operands' ~3.7%, and the MLP's chain (gate_up, silu * up
# requantized, down) and the attention (its scores move with q and k) add up. Measured
# with this file's layers on the CPU, the kernels emulated by ntops_prebuilt's torch
# references (_fp8_reference, scaled_mm's): 5.9-6.3% at decode, 7.0-7.8% for 512- and
# 2048-token prefills (attention weighs more). 0.15 leaves twice that and fails a lost scale or
# residual (tens of percent or more).
FP8_BOUND = 0.15
# bf16 layers: 0.5-0.6% measured so (bench_layer.py's torch layer); bench_layer.py saw its
# bf16 layer within 3.0e-2 of its fp32 one element-wise (units of a row's RMS, H100).
BF16_BOUND = 3e-2
# The attention half alone: beside the residual and the MLP it is a small part of a decode
# step's output, where a wrong cache or descale would hide under FP8_BOUND. Measured as
# above: 4.6-4.8% at decode, 8.9-9.4% for 512- and 2048-token prefills (new keys and
# values quantized, few keys per early query); attending a wrong cache moves it ~100%.
ATTENTION_BOUND = 0.25
ROW, BLOCKED, NT_BF16 = "ntops fp8 row-wise", "ntops fp8 block", "ntops bf16"
TORCH_ROW = "torch fp8 row-wise"
COMPILED_ROW, COMPILED_TENSOR = "torch.compile fp8 row-wise", "torch.compile fp8 per-tensor"
COMPILED_BF16 = "torch.compile bf16"
TABLE = (f"{ROW} eager", f"{ROW} graph", f"{BLOCKED} eager", f"{BLOCKED} graph")
TABLE += (f"{NT_BF16} graph", f"{TORCH_ROW} eager", f"{COMPILED_ROW} graph")
TABLE += (f"{COMPILED_TENSOR} graph", f"{COMPILED_BF16} graph")
# Numerator / denominator, both in a graph, by GPU us; the first is the goal's.
RATIOS = [(ROW, COMPILED_BF16), (BLOCKED, COMPILED_BF16), (ROW, COMPILED_ROW)]
RATIOS += [(ROW, COMPILED_TENSOR), (BLOCKED, COMPILED_ROW), (ROW, NT_BF16), (BLOCKED, NT_BF16)]
GOAL, GOAL_SCENARIO = 0.6, "decode-b1-kv4096"
ROOF_COLUMNS = [f"{label} graph" for label in (ROW, BLOCKED, COMPILED_ROW, COMPILED_TENSOR)]
# HBM bandwidth by device name (NVIDIA's datasheets): H200's HBM3e, else H100 SXM's HBM3.
HBM_BYTES_PER_S = {"H200": 4.8e12, "H100": 3.35e12}
DECODES = [layer.Scenario(batch=batch, tokens=1, cache_len=4096) for batch in (1, 8, 64, 256)]
SCENARIOS = {s.name: s for s in (*DECODES, layer.Scenario(batch=1, tokens=2048, cache_len=0))}


@dataclasses.dataclass(frozen=True)
class Quantized:
    """One projection's weight (out, in) in float8_e4m3fn and its float32 dequantization
    scales (W ~ weight * scale): (1, out) per output channel ("row"), (out / 128, in /
    128) per block ("block"), or one of shape () ("tensor")."""

    weight: torch.Tensor
    scale: torch.Tensor
    granularity: str

    @property
    def group_size(self):
        """Our activations' quantization group: 128 beside blocks, else a token (None)."""
        return BLOCK if self.granularity == "block" else None


@dataclasses.dataclass(frozen=True)
class Fp8Weights:
    """The layer's four projections quantized one way; norms and model from `base`."""

    qkv: Quantized
    o: Quantized
    gate_up: Quantized
    down: Quantized
    base: layer.Weights


@dataclasses.dataclass(frozen=True)
class Fp8Step:
    """A layer call over an FP8 cache: bench_layer's Step's hidden states and rotary
    tables; dense caches (batch, capacity, kv_heads, head_dim) in FlashAttention's layout,
    both scaled by `scale` (float32, (1,)); the cached positions `pos`, also as the int32
    (batch,) tensor flash_attn_with_kvcache takes (made once: a graph replays it)."""

    x: torch.Tensor
    rope_half: tuple
    rope_full: tuple
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    scale: torch.Tensor
    seqlens: torch.Tensor
    pos: int


def quantize_weight(weight, granularity):
    """`weight` (bf16, (out, in)) quantized once, as a checkpoint holds it."""
    w = weight.float()
    out, inner = w.shape
    if granularity == "block":
        w = w.view(out // BLOCK, BLOCK, inner // BLOCK, BLOCK)
        amax = w.abs().amax((1, 3), keepdim=True)
    elif granularity == "row":
        amax = w.abs().amax(1, keepdim=True)
    else:
        amax = w.abs().amax()
    scale = amax.clamp(min=1e-12) / E4M3_MAX
    values = (w / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).view(out, inner)
    shapes = {"block": (out // BLOCK, inner // BLOCK), "row": (1, out), "tensor": ()}
    return Quantized(values, scale.reshape(shapes[granularity]).contiguous(), granularity)


def make_layers(granularities):
    """bench_layer's Llama-3-8B weights (bf16, "bf16") and their quantized forms."""
    weights = layer.make_weights(LLAMA_8B)
    linears = ("qkv", "o", "gate_up", "down")
    quantized = {
        kind: Fp8Weights(
            **{name: quantize_weight(getattr(weights, name), kind) for name in linears},
            base=weights,
        )
        for kind in granularities
    }
    return {"bf16": weights, **quantized}


def to_fp8_cache(cache):
    """bench_layer's bf16 cache (batch, kv_heads, length, head_dim) as an FP8 cache in
    FlashAttention's layout; the bf16 cache is set to the values the FP8 one holds."""
    values = (cache * (1 / FP8_CACHE_SCALE)).clamp_(-E4M3_MAX, E4M3_MAX).to(E4M3)
    cache.copy_(values.to(BF16) * FP8_CACHE_SCALE)
    return values.transpose(1, 2).contiguous()


def make_inputs(scenario):
    """The scenario's bf16 step (bench_layer's make_step) and its FP8 step; a prefill's
    FP8 cache starts empty (bench_layer's prefill has no cache) and takes its entries."""
    step, model = layer.make_step(scenario), scenario.model
    if step.k_cache is None:
        capacity = scenario.tokens + layer.CACHE_HEADROOM
        shape = (scenario.batch, capacity, model.kv_heads, model.head_dim)
        caches = [torch.zeros(shape, dtype=torch.uint8, device="cuda").view(E4M3) for _ in "kv"]
    else:
        caches = [to_fp8_cache(step.k_cache), to_fp8_cache(step.v_cache)]
    scale = torch.full((1,), FP8_CACHE_SCALE, device="cuda")
    seqlens = torch.full((scenario.batch,), scenario.cache_len, dtype=torch.int32, device="cuda")
    rope = (step.rope_half, step.rope_full)
    return step, Fp8Step(step.x, *rope, *caches, scale, seqlens, scenario.cache_len)


def grouped_attention(q, keys, values):
    """Float32 attention of q (batch, seq, heads, head_dim) over keys and values (batch,
    keys, kv_heads, head_dim), causal from the bottom right (a decode's one query sees
    every key), each key head shared by heads / kv_heads queries as enable_gqa shares
    them; the groups are folded into the rows so that no key is copied per head."""
    batch, seq, heads, dim = q.shape
    length, kv_heads = keys.shape[1:3]
    group = heads // kv_heads
    rows = q.view(batch, seq, kv_heads, group, dim).permute(0, 2, 3, 1, 4)
    scores = rows.reshape(batch, kv_heads, group * seq, dim) @ keys.permute(0, 2, 3, 1)
    visible = torch.ones(seq, length, dtype=torch.bool, device=q.device).tril(length - seq)
    scores = scores.view(batch, kv_heads, group, seq, length) / math.sqrt(dim)
    weights = scores.masked_fill(~visible, -math.inf).softmax(-1)
    out = weights.view(batch, kv_heads, group * seq, length) @ values.transpose(1, 2)
    out = out.view(batch, kv_heads, group, seq, dim).permute(0, 3, 1, 2, 4)
    return out.reshape(batch, seq, heads, dim)


def reference_layer(weights, step):
    """The layer in float32 from the bf16 weights over `step`'s dequantized cache and the
    step's own keys and values (not quantized), rotated by the bf16 tables every layer
    takes: (output, attention rows)."""
    model = weights.model
    batch, seq, _ = step.x.shape
    x = step.x.view(-1, model.hidden).float()
    h = F.rms_norm(x, (model.hidden,), weights.input_norm.float(), model.eps)
    qkv = F.linear(h, weights.qkv.float()).split((model.q_size, model.kv_size, model.kv_size), -1)
    q, k, v = (t.reshape(batch, seq, -1, model.head_dim) for t in qkv)
    sin, cos = (table.float()[:, None] for table in step.rope_full)
    q, k = q * cos + layer.rotate_half(q) * sin, k * cos + layer.rotate_half(k) * sin
    end = step.pos + seq
    keys, values = (cache[:, :end].float() * step.scale for cache in (step.k_cache, step.v_cache))
    keys[:, step.pos :], values[:, step.pos :] = k, v
    attention = grouped_attention(q, keys, values).reshape(-1, model.q_size)
    x = x + F.linear(attention, weights.o.float())
    h = F.rms_norm(x, (model.hidden,), weights.post_norm.float(), model.eps)
    gate, up = F.linear(h, weights.gate_up.float()).chunk(2, -1)
    return x + F.linear(F.silu(gate) * up, weights.down.float()), attention


def ntops_linear(nt, values, scales, linear):
    """values @ weight.t() in bf16: scaled_mm with (M, 1) and (1, N) scales (the weight
    transposed: column-major, as Hopper's FP8 tensor cores read it), or
    w8a8_block_fp8_matmul (vLLM's argument order, the weight in nn.Linear's layout)."""
    if linear.granularity == "block":
        block = [BLOCK, BLOCK]
        return nt.w8a8_block_fp8_matmul(values, linear.weight, scales, linear.scale, block, BF16)
    return nt.scaled_mm(values, linear.weight.t(), scales, linear.scale, out_dtype=BF16)


def ntops_quantized(nt, x, group_size):
    """x quantized per token (scales (rows, 1)) or per group of `group_size`."""
    if group_size is None:
        return nt.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
    return nt.per_token_group_quant_fp8(x, group_size)


def ntops_fp8_attention(nt, weights, step):
    """The attention half in ntops_prebuilt's FP8 functions, (batch * seq, q_size) rows:
    queries and keys rotated in place in the fused projection (bench_layer's way); the
    views of q, k and v go to the kernel as they are (their head_dim is contiguous)."""
    model = weights.base.model
    batch, seq, _ = step.x.shape
    rows = step.x.view(batch * seq, model.hidden)
    norm = weights.base.input_norm
    h, h_scale = nt.rms_norm_quant_fp8(rows, norm, model.eps, group_size=weights.qkv.group_size)
    qkv = ntops_linear(nt, h, h_scale, weights.qkv)
    rotated = model.q_size + model.kv_size
    heads = qkv[:, :rotated].view(batch, seq, model.heads + model.kv_heads, model.head_dim)
    nt.rotary_position_embedding(heads, *step.rope_half, interleaved=False, inplace=True)
    q, k = heads.split((model.heads, model.kv_heads), 2)
    v = qkv[:, rotated:].view(batch, seq, model.kv_heads, model.head_dim)
    attention = nt.flash_attn_with_kvcache(
        q, step.k_cache, step.v_cache, k, v, cache_seqlens=step.seqlens, causal=True,
        k_descale=step.scale, v_descale=step.scale,
    )  # fmt: skip
    return attention.view(batch * seq, model.q_size)


def ntops_fp8_layer(nt, weights, step):
    """The layer in ntops_prebuilt's FP8 functions: attention, output projection,
    residual, post-norm quantized, gate/up, silu * up quantized, down, residual."""
    model, group = weights.base.model, weights.o.group_size
    rows = step.x.view(-1, model.hidden)
    attention = ntops_quantized(nt, ntops_fp8_attention(nt, weights, step), group)
    x = nt.add(rows, ntops_linear(nt, *attention, weights.o))
    h = nt.rms_norm_quant_fp8(x, weights.base.post_norm, model.eps, group_size=group)
    gate_up = ntops_linear(nt, *h, weights.gate_up)
    size = model.intermediate
    mlp = nt.silu_mul_quant_fp8(gate_up[:, :size], gate_up[:, size:], group_size=group)
    return nt.add(x, ntops_linear(nt, *mlp, weights.down))


def torch_quantized(x, granularity):
    """Dynamic quantization in torch ops: a scale per token (row) or one per tensor."""
    x = x.float()
    amax = x.abs().amax() if granularity == "tensor" else x.abs().amax(-1, keepdim=True)
    scale = amax.clamp(min=1e-12) / E4M3_MAX
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


def torch_linear(x, linear):
    """torch._scaled_mm of x quantized as `linear`'s weight is (mat2 column-major, as
    torch requires: the transposed weight)."""
    values, scale = torch_quantized(x, linear.granularity)
    return torch._scaled_mm(
        values, linear.weight.t(), scale_a=scale, scale_b=linear.scale, out_dtype=BF16
    )


def torch_fp8_attention(weights, step):
    """ntops_fp8_attention's math in torch ops, rotary as bench_layer's torch layer does it.
    is_causal's diagonal is the top left: right for a decode (one query, no mask) and a
    prefill (as many keys as queries), wrong for a chunk, which no scenario has."""
    model = weights.base.model
    batch, seq, _ = step.x.shape
    rows = step.x.view(-1, model.hidden).float()
    h = F.rms_norm(rows, (model.hidden,), weights.base.input_norm.float(), model.eps)
    qkv = torch_linear(h, weights.qkv).split((model.q_size, model.kv_size, model.kv_size), -1)
    q, k, v = (t.reshape(batch, seq, -1, model.head_dim) for t in qkv)
    sin, cos = (table[:, None] for table in step.rope_full)
    q, k = q * cos + layer.rotate_half(q) * sin, k * cos + layer.rotate_half(k) * sin
    end = step.pos + seq
    for cache, new in ((step.k_cache, k), (step.v_cache, v)):
        cache[:, step.pos : end] = (new.float() / step.scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    keys, values = (
        (cache[:, :end].float() * step.scale).to(BF16).transpose(1, 2)
        for cache in (step.k_cache, step.v_cache)
    )
    attention = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, is_causal=seq > 1, enable_gqa=True
    )
    return attention.transpose(1, 2).reshape(-1, model.q_size)


def torch_fp8_layer(weights, step):
    """ntops_fp8_layer's math in torch ops (silu in fp32, as the fused kernel takes it)."""
    model = weights.base.model
    rows = step.x.view(-1, model.hidden)
    x = rows + torch_linear(torch_fp8_attention(weights, step), weights.o)
    h = F.rms_norm(x.float(), (model.hidden,), weights.base.post_norm.float(), model.eps)
    gate, up = torch_linear(h, weights.gate_up).float().chunk(2, -1)
    return x + torch_linear(F.silu(gate) * up, weights.down)


def checked(name, output, reference, bound):
    """The relative Frobenius error of `output` against the float32 `reference`; raises
    past `bound` (or on NaN)."""
    output = output.float().reshape(reference.shape)
    error = ((output - reference).norm() / reference.norm()).item()
    if not error <= bound:
        raise AssertionError(f"{name}: relative error {error:.2e} against float32 is over {bound}")
    return error


def checked_methods(calls, reference, errors):
    """Each of `calls` (label -> (name when called, fn)) and its CUDA graph (`label
    graph`), each checked into `errors`: the methods to time."""
    methods = {}
    for label, (plain, fn) in calls.items():
        bound = BF16_BOUND if "bf16" in label else FP8_BOUND
        errors[plain] = checked(plain, fn(), reference, bound)
        replay, output = layer.captured(fn)
        replay()
        errors[f"{label} graph"] = checked(f"{label} graph", output, reference, bound)
        methods.update({plain: fn, f"{label} graph": replay})
    return methods


def ntops_scenario(nt, layers, scenario, effort):
    """This process's columns of one scenario. The FP8 layers share one cache: each
    writes the step's entries at the same place and reads its own from its inputs."""
    print(f"layer {scenario.name}", file=sys.stderr)
    step, fp8_step = make_inputs(scenario)
    reference, reference_attention = reference_layer(layers["bf16"], fp8_step)
    calls, errors = {}, {}
    for label, weights in ((ROW, layers["row"]), (BLOCKED, layers["block"])):
        attention = ntops_fp8_attention(nt, weights, fp8_step)
        name = f"{label} attention"
        errors[name] = checked(name, attention, reference_attention, ATTENTION_BOUND)
        calls[label] = (f"{label} eager", functools.partial(ntops_fp8_layer, nt, weights, fp8_step))
    bf16 = functools.partial(layer.ntops_layer, nt, layers["bf16"], step)
    calls[NT_BF16] = (f"{NT_BF16} eager", bf16)
    methods = checked_methods(calls, reference, errors)
    return {"timings": layer.measure(methods, effort), "errors": errors}


def compiled_scenario(layers, scenario, effort):
    """The child's columns of one scenario: torch fp8 row-wise eager, and compiled (afresh
    each scenario: dynamo keeps at most 8 entries per function) alone and in a graph."""
    print(f"torch.compile {scenario.name}", file=sys.stderr)
    step, fp8_step = make_inputs(scenario)
    reference, reference_attention = reference_layer(layers["bf16"], fp8_step)
    row, name = layers["row"], f"{TORCH_ROW} attention"
    attention = torch_fp8_attention(row, fp8_step)
    errors = {name: checked(name, attention, reference_attention, ATTENTION_BOUND)}
    eager = functools.partial(torch_fp8_layer, row, fp8_step)
    errors[f"{TORCH_ROW} eager"] = checked(f"{TORCH_ROW} eager", eager(), reference, FP8_BOUND)
    torch.compiler.reset()
    compiled = {
        COMPILED_ROW: (torch_fp8_layer, row, fp8_step),
        COMPILED_TENSOR: (torch_fp8_layer, layers["tensor"], fp8_step),
        COMPILED_BF16: (layer.torch_layer, layers["bf16"], step),
    }
    calls = {
        label: (label, functools.partial(torch.compile(fn, dynamic=False), *args))
        for label, (fn, *args) in compiled.items()
    }
    methods = {f"{TORCH_ROW} eager": eager, **checked_methods(calls, reference, errors)}
    return {"timings": layer.measure(methods, effort), "errors": errors}


def compiled_worker(scenarios, effort):
    """--compiled-worker: the child's columns, as one JSON line on stdout."""
    layers = make_layers(("row", "tensor"))
    results = {s.name: compiled_scenario(layers, s, effort) for s in scenarios}
    print(json.dumps(results))


def compiled_columns(scenarios, quick):
    """The child process's columns, or None and why it failed (its stderr shows above)."""
    command = [sys.executable, __file__, "--compiled-worker", "--scenarios"]
    command.append(",".join(scenario.name for scenario in scenarios))
    run = subprocess.run(
        [*command, *(["--quick"] if quick else [])], stdout=subprocess.PIPE, text=True
    )
    if run.returncode:
        return None, f"the torch.compile worker failed with exit code {run.returncode}"
    return json.loads(run.stdout.splitlines()[-1]), None


def fp8_step_bytes(weights, scenario):
    """The least an FP8 decode step moves: FP8 weights and their float32 scales, the bf16
    norms, the FP8 keys and values attended, the bf16 hidden states in and out."""
    model = weights.base.model
    linears = (weights.qkv, weights.o, weights.gate_up, weights.down)
    weight = sum(linear.weight.numel() + 4 * linear.scale.numel() for linear in linears)
    keys = scenario.cache_len + scenario.tokens
    cache = 2 * scenario.batch * model.kv_heads * keys * model.head_dim
    hidden = 2 * 2 * scenario.batch * scenario.tokens * model.hidden
    return weight + 2 * 2 * model.hidden + cache + hidden


def roof(layers, scenario, rate, timings):
    """A decode step against the HBM roof: its FP8 bytes and their time at `rate`, the
    bf16 step's (bench_layer's step_bytes), and the fraction of the FP8 roof each graph
    reaches (roof us / GPU us)."""
    fp8 = fp8_step_bytes(layers["row"], scenario)
    bf16 = layer.step_bytes(layers["bf16"], scenario)
    entry = {"fp8 MB": fp8 / 1e6, "fp8 roof us": fp8 / rate * 1e6}
    entry.update({"bf16 roof us": bf16 / rate * 1e6, "fp8 / bf16 roof": fp8 / bf16})
    for column in ROOF_COLUMNS:
        if column in timings:
            entry[f"{column}: roof / time"] = entry["fp8 roof us"] / timings[column]["gpu_us"]
    return entry


def finish(report, layers, scenarios):
    """Each scenario's ratios and (decode) roof, once every column is in."""
    for scenario in scenarios:
        entry = report["scenarios"][scenario.name]
        us = {name: timing["gpu_us"] for name, timing in entry["timings"].items()}
        pairs = [(f"{a} graph", f"{b} graph") for a, b in RATIOS]
        entry["ratios"] = {f"{a} / {b}": us[a] / us[b] for a, b in pairs if a in us and b in us}
        if scenario.decode:
            entry["roof"] = roof(layers, scenario, report["hbm_bytes_per_s"], entry["timings"])


def summary(report):
    """The goal at batch-1 decode, then each scenario's ratios of our row-wise graph."""
    lines = []
    entry = report["scenarios"].get(GOAL_SCENARIO, {})
    for label in (ROW, BLOCKED):
        key = f"{label} graph / {COMPILED_BF16} graph"
        if key in entry.get("ratios", {}):
            value = entry["ratios"][key]
            verdict = "met" if value <= GOAL else "not met"
            lines.append(
                f"goal, {GOAL_SCENARIO}: {key} {value:.3f} (<= {GOAL}: {verdict}; "
                f"HBM roofs' ratio {entry['roof']['fp8 / bf16 roof']:.3f})"
            )
    for name, entry in report["scenarios"].items():
        ours = [f"{k} {v:.3f}" for k, v in entry["ratios"].items() if k.startswith(ROW)]
        lines.append(f"{name}: " + ", ".join(ours))
    return lines


def print_grid(title, report, key, form):
    """A table of each scenario's `key` (label -> value; timings: TABLE's GPU us): a row
    per label, a column per scenario."""
    columns, rows = list(report["scenarios"]), {}
    for name, entry in report["scenarios"].items():
        values = entry.get(key, {})
        if key == "timings":
            values = {column: values[column]["gpu_us"] for column in TABLE if column in values}
        for label, value in values.items():
            rows.setdefault(label, {})[name] = value
    print(f"\n{title}\n{'':64s}" + "".join(f"{name:>20s}" for name in columns))
    for label, values in rows.items():
        cells = (form.format(values[name]) if name in values else "n/a" for name in columns)
        print(f"{label:64s}" + "".join(f"{cell:>20s}" for cell in cells))


def print_report(report):
    print(f"device: {report['device']}, torch {report['torch']}, toolchain {report['toolchain']}")
    rate = report["hbm_bytes_per_s"] / 1e12
    grids = (
        ("GPU us per layer (median; wall us in the JSON)", "timings", "{:.1f}"),
        (f"ratios of GPU us (goal: the first <= {GOAL} at {GOAL_SCENARIO})", "ratios", "{:.3f}"),
        (f"decode steps against the HBM roof ({rate:.2f} TB/s)", "roof", "{:.4g}"),
        ("relative Frobenius error against the float32 layer", "errors", "{:.2e}"),
    )
    for title, key, form in grids:
        print_grid(title, report, key, form)
    print("\nsummary:")
    for line in report["summary"] + report["failures"]:
        print(f"  {line}")


def measure_all(args):
    """Every figure: ntops_prebuilt here, then torch and torch.compile in a child."""
    import ntops_prebuilt as nt

    nt.preload()  # every kernel loaded now: none may load during graph capture
    effort = layer.QUICK if args.quick else layer.FULL
    layers = make_layers(("row", "block"))
    device = torch.cuda.get_device_name()
    report = {**layer.provenance(nt), "method": __doc__, "scenarios": {}}
    report["hbm_bytes_per_s"] = HBM_BYTES_PER_S["H200" if "H200" in device else "H100"]
    for scenario in args.scenarios:
        entry = ntops_scenario(nt, layers, scenario, effort)
        about = {key: getattr(scenario, key) for key in ("batch", "tokens", "cache_len")}
        report["scenarios"][scenario.name] = {"scenario": about, **entry}
    layer.assert_no_compiler()
    torch.cuda.empty_cache()  # this process's cached blocks would crowd the child's
    compiled, error = compiled_columns(args.scenarios, args.quick)
    for name, entry in (compiled or {}).items():
        report["scenarios"][name]["timings"].update(entry["timings"])
        report["scenarios"][name]["errors"].update(entry["errors"])
    finish(report, layers, args.scenarios)
    report["failures"] = [error] if error else []
    report["summary"] = summary(report)
    return report


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenarios",
        type=layer.names(SCENARIOS),
        default=list(SCENARIOS.values()),
        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats")
    parser.add_argument("--json", help="also write every figure here")
    parser.add_argument("--compiled-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def main():
    args = parse_args()
    if args.compiled_worker:
        compiled_worker(args.scenarios, layer.QUICK if args.quick else layer.FULL)
        return
    report = measure_all(args)
    print_report(report)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=1)
    if report["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
