"""`make bench-layer`: one Llama-3-8B decoder layer (bf16) written once with
ntops_prebuilt's functions and once with torch's, on the same weights and inputs:
decode steps over a KV cache and a 2048-token causal prefill, each timed eager and in a
CUDA graph, against torch eager and torch.compile (alone and in a graph); then the
layer's kernels one by one against torch's.

Every result is checked against torch before anything is timed. Wall us: perf_counter
around back-to-back calls, one synchronize at the end. GPU us: CUDA events around
back-to-back calls queued behind a GPU sleep, so that the device runs them without the
gaps a slower host leaves (ntops_prebuilt.tune's `gpu_us`: the tuner picks by it
too). Medians of repeats, the methods taking turns. torch.compile imports Triton, which
the ntops_prebuilt runs must do without: its columns come from a child process (this
script with --compiled-worker).
"""

import argparse
import dataclasses
import functools
import itertools
import json
import math
import statistics
import subprocess
import sys

import torch

from ntops_prebuilt.tune import gpu_us, wall_us  # the tuner's timing, shared

F = torch.nn.functional
BF16 = torch.bfloat16
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 4096, 32, 8, 128, 14336
Q_SIZE, KV_SIZE = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
EPS, ROPE_THETA = 1e-5, 500000.0
SEED = 0
CACHE_HEADROOM = 128  # free cache positions past the step's: attended views are strided, as served
ROTATION_BYTES = 256 * 2**20  # over 5x the H100's 50 MB L2
COLUMNS = ("ntops eager", "ntops graph", "torch eager", "torch.compile", "torch.compile graph")
# The ntops_prebuilt layer under torch.compile (its functions are torch.library ops there).
COLUMNS += ("ntops torch.compile", "ntops torch.compile graph")
OURS, TORCH, TORCH_MM = "ntops_prebuilt", "torch", "torch.mm(x, W.t())"
LINEARS = {"qkv": (HIDDEN, Q_SIZE + 2 * KV_SIZE), "o": (HIDDEN, HIDDEN)}
LINEARS |= {"gate_up": (HIDDEN, 2 * INTERMEDIATE), "down": (INTERMEDIATE, HIDDEN)}
DECODE_ROWS, PREFILL_ROWS = (1, 8, 32, 64), 2048
DECODE_BATCHES, DECODE_KEYS = (1, 8, 32), (1024, 4096, 32768)
# Element-wise bounds, over bf16 noise measured on H100 in the units `check` uses: torch's
# own bf16 layer is up to 3.0e-2 off its fp32 layer at prefill (8M elements), its bf16
# attention 5.3e-2 off its fp32 one (early rows attend a few keys, so weights are peaky).
TOLERANCE, ATTENTION_TOLERANCE = 5e-2, 8e-2


@dataclasses.dataclass(frozen=True)
class Effort:
    """Calls per timed loop, and loops per figure (their median is reported)."""

    calls: int
    repeats: int


FULL, QUICK = Effort(calls=20, repeats=7), Effort(calls=5, repeats=3)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One layer call: `tokens` new tokens for each of `batch` sequences after `cache_len`
    cached positions; cache_len 0 is a prefill, causal over its own tokens, no cache."""

    batch: int
    tokens: int
    cache_len: int

    @property
    def name(self):
        if self.cache_len:
            return f"decode-b{self.batch}-kv{self.cache_len}"
        return f"prefill-b{self.batch}-t{self.tokens}"


SCENARIOS = {
    scenario.name: scenario
    for scenario in (
        Scenario(batch=1, tokens=1, cache_len=4096),
        Scenario(batch=8, tokens=1, cache_len=4096),
        Scenario(batch=64, tokens=1, cache_len=4096),
        Scenario(batch=1, tokens=1, cache_len=32768),
        Scenario(batch=1, tokens=2048, cache_len=0),
    )
}


@dataclasses.dataclass(frozen=True)
class Weights:
    """One layer's parameters in nn.Linear layout (out, in), fused as serving stacks keep
    them: q, k and v rows in one matrix, gate rows then up rows in another."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


@dataclasses.dataclass(frozen=True)
class Step:
    """A layer call's inputs: hidden states (batch, seq, hidden), the rotary tables of its
    positions, (seq, head_dim / 2) for ntops_prebuilt and (seq, head_dim) for rotate_half,
    both made once per step as a model's rotary embedding does for all its layers, and for
    a decode step the KV cache and the position its tokens go to."""

    x: torch.Tensor
    rope_half: tuple
    rope_full: tuple
    k_cache: torch.Tensor | None
    v_cache: torch.Tensor | None
    pos: int

    def with_own_cache(self):
        """The same step on a copy of the cache: each layer writes its own."""
        if self.k_cache is None:
            return self
        return dataclasses.replace(self, k_cache=self.k_cache.clone(), v_cache=self.v_cache.clone())


def randn(generator, *shape, scale=1.0):
    return torch.randn(shape, generator=generator, device="cuda", dtype=BF16) * scale


def make_weights():
    """Weights from SEED, so the child process builds the same ones. randn * 0.02 keeps
    every activation near unit scale (0.02 * sqrt(4096) = 1.3), the output well conditioned."""
    generator = torch.Generator("cuda").manual_seed(SEED)

    def matrix(rows, columns):
        return randn(generator, rows, columns, scale=0.02)

    def norm():
        return 1 + randn(generator, HIDDEN, scale=0.1)

    return Weights(
        input_norm=norm(),
        qkv=matrix(Q_SIZE + 2 * KV_SIZE, HIDDEN),
        o=matrix(HIDDEN, Q_SIZE),
        post_norm=norm(),
        gate_up=matrix(2 * INTERMEDIATE, HIDDEN),
        down=matrix(HIDDEN, INTERMEDIATE),
    )


def make_step(scenario):
    """The scenario's inputs from SEED + 1: random hidden states and cache contents."""
    generator = torch.Generator("cuda").manual_seed(SEED + 1)
    x = randn(generator, scenario.batch, scenario.tokens, HIDDEN)
    caches = (None, None)
    if scenario.cache_len:
        length = scenario.cache_len + scenario.tokens + CACHE_HEADROOM
        shape = (scenario.batch, KV_HEADS, length, HEAD_DIM)
        caches = (randn(generator, *shape), randn(generator, *shape))
    positions = torch.arange(scenario.cache_len, scenario.cache_len + scenario.tokens)
    inverse = ROPE_THETA ** -(torch.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angles = (positions[:, None] * inverse).cuda()
    half = (angles.sin().to(BF16), angles.cos().to(BF16))
    full = tuple(torch.cat((table, table), -1) for table in half)
    return Step(x, half, full, *caches, pos=scenario.cache_len)


def rotate_half(x):
    first, second = x.chunk(2, -1)
    return torch.cat((-second, first), -1)


def torch_attention(weights, step):
    """The attention half of the layer in torch, as Hugging Face's Llama writes it (fused
    projections), up to the output projection: (batch, seq, heads * head_dim)."""
    batch, seq, _ = step.x.shape
    h = F.rms_norm(step.x, (HIDDEN,), weights.input_norm, EPS)
    q, k, v = F.linear(h, weights.qkv).split((Q_SIZE, KV_SIZE, KV_SIZE), -1)
    q = q.view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
    k = k.view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    v = v.view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    sin, cos = step.rope_full
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    if step.k_cache is None:
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        end = step.pos + seq
        step.k_cache[:, :, step.pos : end] = k
        step.v_cache[:, :, step.pos : end] = v
        keys, values = step.k_cache[:, :, :end], step.v_cache[:, :, :end]
        attention = F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
    return attention.transpose(1, 2).reshape(batch, seq, Q_SIZE)


def torch_layer(weights, step):
    """The layer in torch: attention, output projection, residual, SwiGLU MLP, residual."""
    x = step.x + F.linear(torch_attention(weights, step), weights.o)
    h = F.rms_norm(x, (HIDDEN,), weights.post_norm, EPS)
    gate, up = F.linear(h, weights.gate_up).chunk(2, -1)
    return x + F.linear(F.silu(gate) * up, weights.down)


def ntops_attention(nt, weights, step):
    """torch_attention in ntops_prebuilt's functions, on (batch * seq, hidden) rows. The one
    torch kernel left is the copy `reshape` makes of the attention output at prefill, as in
    torch_attention; at decode it is a view. The queries and keys lie side by side in the
    fused projection's rows: one in-place rotation turns both."""
    batch, seq, _ = step.x.shape
    h = nt.rms_norm(step.x.view(batch * seq, HIDDEN), (HIDDEN,), weights.input_norm, EPS)
    qkv = nt.mm(h, weights.qkv.t())
    sin, cos = step.rope_half
    heads = qkv[:, : Q_SIZE + KV_SIZE].view(batch, seq, HEADS + KV_HEADS, HEAD_DIM)
    nt.rotary_position_embedding(heads, sin, cos, interleaved=False, inplace=True)
    q, k = heads.split((HEADS, KV_HEADS), 2)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = qkv[:, Q_SIZE + KV_SIZE :].view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
    sdpa = nt.scaled_dot_product_attention
    if step.k_cache is None:
        attention = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    else:
        end = step.pos + seq
        attention = sdpa(
            q,
            step.k_cache[:, :, :end],
            step.v_cache[:, :, :end],
            enable_gqa=True,
            present_key=k,
            present_value=v,
            present_key_slot=step.k_cache[:, :, step.pos : end],
            present_value_slot=step.v_cache[:, :, step.pos : end],
        )
    return attention.transpose(1, 2).reshape(batch * seq, Q_SIZE)


def ntops_layer(nt, weights, step):
    """torch_layer in ntops_prebuilt's functions; the residual adds ride on the products
    (addmm with the residual as its input)."""
    rows = step.x.view(-1, HIDDEN)
    x = nt.addmm(rows, ntops_attention(nt, weights, step), weights.o.t())
    h = nt.mm(nt.rms_norm(x, (HIDDEN,), weights.post_norm, EPS), weights.gate_up.t())
    mlp = nt.silu_mul(h[:, :INTERMEDIATE], h[:, INTERMEDIATE:])
    return nt.addmm(x, mlp, weights.down.t()).view(step.x.shape)


def check(name, ours, reference, tolerance=TOLERANCE):
    """The relative Frobenius error of `ours`; raises unless it is under 1e-2 (bf16 noise
    measures 3e-3 to 7e-3 here) and every element is within `tolerance` of its value plus
    `tolerance` times the RMS of its last-dim vector (a row of a product, a head's output):
    a bf16 result's error scales with the magnitudes that were summed, not with 1."""
    ours, reference = ours.float(), reference.float()
    scale = reference.square().mean(-1, keepdim=True).sqrt().clamp_min(1e-30)
    torch.testing.assert_close(
        ours / scale,
        reference / scale,
        rtol=tolerance,
        atol=tolerance,
        msg=lambda text: f"{name}, in units of its vectors' RMS: {text}",
    )
    error = ((ours - reference).norm() / reference.norm()).item()
    if not error < 1e-2:
        raise AssertionError(f"{name}: relative Frobenius error {error:.2e} is not below 1e-2")
    return error


def check_attention(nt, name, weights, ours, theirs):
    """The attention halves alone, and the cache entries they write: in the layer's output,
    attention over thousands of random cached values adds little beside the residual and
    the MLP, so a mistake there would hide (attending before writing the step's entry moves
    the layer's output by 5e-3, its attention by 2.3e-2). Writing the step's entries again
    is harmless: they are the same values at the same place."""
    heads = (-1, HEADS, HEAD_DIM)
    ours_heads = ntops_attention(nt, weights, ours).view(heads)
    reference = torch_attention(weights, theirs).reshape(heads)
    error = check(f"{name} attention", ours_heads, reference, ATTENTION_TOLERANCE)
    if ours.k_cache is not None:
        for label, mine, cache in (
            ("k", ours.k_cache, theirs.k_cache),
            ("v", ours.v_cache, theirs.v_cache),
        ):
            check(f"{name} {label} cache", mine[:, :, ours.pos], cache[:, :, ours.pos])
    return error


def captured(fn):
    """fn recorded in a CUDA graph: (replay, the captured call's output). Warm-up runs on a
    side stream first, as torch.cuda.graph's documentation requires, so that lazy set-up
    (cuBLAS workspaces, compiled code) happens outside the capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = fn()
    return graph.replay, output


def eager_and_graph(name, eager, graph, fn, reference):
    """fn and its CUDA graph, each checked against `reference`: the methods to time, named
    `eager` and `graph`, and their errors."""
    errors = {eager: check(f"{name} {eager}", fn(), reference)}
    replay, output = captured(fn)
    replay()
    errors[graph] = check(f"{name} {graph}", output, reference)
    return {eager: fn, graph: replay}, errors


def measure(methods, effort):
    """Median wall us and GPU us per call of each of `methods` (name -> fn), the methods
    taking turns loop by loop so that machine noise hits them alike."""
    for fn in methods.values():
        for _ in range(3):
            fn()
    samples = {name: ([], []) for name in methods}
    for _ in range(effort.repeats):
        for name, fn in methods.items():
            wall = wall_us(fn, effort.calls)
            samples[name][0].append(wall)
            samples[name][1].append(gpu_us(fn, effort.calls, wall))
    median = statistics.median
    return {
        name: {"wall_us": median(wall), "gpu_us": median(gpu)}
        for name, (wall, gpu) in samples.items()
    }


def layer_scenario(nt, weights, scenario, effort):
    """The three main-process columns of one scenario, each checked against torch eager."""
    print(f"layer {scenario.name}", file=sys.stderr)
    ours = make_step(scenario)
    theirs = ours.with_own_cache()
    torch_eager = functools.partial(torch_layer, weights, theirs)
    reference = torch_eager()
    ntops = functools.partial(ntops_layer, nt, weights, ours)
    attention_error = check_attention(nt, scenario.name, weights, ours, theirs)
    methods, errors = eager_and_graph(scenario.name, "ntops eager", "ntops graph", ntops, reference)
    errors["ntops attention"] = attention_error
    timings = measure({**methods, "torch eager": torch_eager}, effort)
    return {"scenario": dataclasses.asdict(scenario), "timings": timings, "errors": errors}


def compiled_worker(scenarios, effort):
    """--compiled-worker: the torch.compile columns, as one JSON line on stdout. Default mode
    (dynamic=False: each scenario's shapes are static, as a graph's are), then captured by
    hand in a CUDA graph, as the ntops_prebuilt graph is. Both layers are compiled: torch's,
    and ntops_prebuilt's with fullgraph=True (its functions are ops in the graph, its
    kernels launched by the ops; Inductor fuses around them)."""
    import ntops_prebuilt as nt

    nt.preload()
    weights = make_weights()
    results = {}
    for scenario in scenarios:
        print(f"torch.compile {scenario.name}", file=sys.stderr)
        step = make_step(scenario)
        reference = torch_layer(weights, step.with_own_cache())
        torch.compiler.reset()  # each scenario compiles afresh, not as a dynamic-shape recompile
        compiled = functools.partial(torch.compile(torch_layer, dynamic=False), weights, step)
        names = ("torch.compile", "torch.compile graph")
        methods, errors = eager_and_graph(scenario.name, *names, compiled, reference)
        torch.compiler.reset()
        ours = torch.compile(functools.partial(ntops_layer, nt), dynamic=False, fullgraph=True)
        names = ("ntops torch.compile", "ntops torch.compile graph")
        step = make_step(scenario)  # a fresh cache: the compiled step writes it as eager does
        more, more_errors = eager_and_graph(
            scenario.name, *names, functools.partial(ours, weights, step), reference
        )
        timings = measure({**methods, **more}, effort)
        results[scenario.name] = {"timings": timings, "errors": {**errors, **more_errors}}
    print(json.dumps(results))


def compiled_columns(scenarios, quick):
    """The child process's columns, or None and why it failed (its stderr shows above)."""
    names = ",".join(scenario.name for scenario in scenarios)
    command = [sys.executable, __file__, "--compiled-worker", "--scenarios", names]
    if quick:
        command.append("--quick")
    run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if run.returncode:
        return None, f"the torch.compile worker failed with exit code {run.returncode}"
    return json.loads(run.stdout.splitlines()[-1]), None


@dataclasses.dataclass(frozen=True)
class Case:
    """A kernel timed against torch: methods (OURS, TORCH, maybe TORCH_MM) and the bytes it
    must move (the rate of memory-bound cases) or the flops it must do (the others')."""

    name: str
    group: str
    methods: dict
    bytes: int
    flops: int
    memory_bound: bool


def rotation(nbytes):
    """How many copies of an operand of `nbytes` to cycle through so that together they pass
    ROTATION_BYTES: each call then reads its operand from HBM, as a model step reads each
    weight, not from the L2 where the previous call left it."""
    return max(2, math.ceil(ROTATION_BYTES / nbytes))


def rotating(fn, operands):
    """fn called on the next tuple of `operands` each time."""
    cycle = itertools.cycle(operands)
    return lambda: fn(*next(cycle))


def cuda_randn(*shape, scale=1.0):
    return torch.randn(shape, device="cuda", dtype=BF16) * scale


def linear_cases(nt):
    """The layer's products x @ W.t(), W in nn.Linear layout, at decode rows (memory-bound:
    the weight is the traffic) and prefill rows; torch's is F.linear(x, W)."""
    for label, (inner, outer) in LINEARS.items():
        weights = [cuda_randn(outer, inner, scale=0.02) for _ in range(rotation(2 * outer * inner))]
        for rows in (*DECODE_ROWS, PREFILL_ROWS):
            x = cuda_randn(rows, inner)
            name = f"linear {label} M={rows} ({inner}->{outer})"
            check(name, nt.mm(x, weights[0].t()), F.linear(x, weights[0]))
            transposed = [(x, weight.t()) for weight in weights]
            methods = {
                OURS: rotating(nt.mm, transposed),
                TORCH: rotating(F.linear, [(x, weight) for weight in weights]),
                TORCH_MM: rotating(torch.mm, transposed),
            }
            decode = rows < PREFILL_ROWS
            yield Case(
                name,
                f"linear {'decode' if decode else 'prefill'}",
                methods,
                bytes=2 * (outer * inner + rows * (inner + outer)),
                flops=2 * rows * inner * outer,
                memory_bound=decode,
            )


def square_case(nt):
    a, b = cuda_randn(4096, 4096), cuda_randn(4096, 4096)
    check("mm 4096^3", nt.mm(a, b), torch.mm(a, b))
    methods = {OURS: lambda: nt.mm(a, b), TORCH: lambda: torch.mm(a, b)}
    return Case("mm 4096^3 (a @ b)", "mm 4096^3", methods, 3 * 2 * 4096**2, 2 * 4096**3, False)


def attention_case(nt, name, group, operands, is_causal, **work):
    """SDPA with grouped-query heads on `operands` (tuples of q, k, v), checked first."""
    options = {"is_causal": is_causal, "enable_gqa": True}
    ours = functools.partial(nt.scaled_dot_product_attention, **options)
    theirs = functools.partial(F.scaled_dot_product_attention, **options)
    check(name, ours(*operands[0]), theirs(*operands[0]), ATTENTION_TOLERANCE)
    methods = {OURS: rotating(ours, operands), TORCH: rotating(theirs, operands)}
    return Case(name, group, methods, **work)


def attention_cases(nt):
    """Decode (one query per sequence over its keys: memory-bound), then causal prefill."""
    for batch, keys in itertools.product(DECODE_BATCHES, DECODE_KEYS):
        q = cuda_randn(batch, HEADS, 1, HEAD_DIM)
        kv_shape = (batch, KV_HEADS, keys, HEAD_DIM)
        kv_bytes = 2 * 2 * math.prod(kv_shape)
        operands = [
            (q, cuda_randn(*kv_shape), cuda_randn(*kv_shape)) for _ in range(rotation(kv_bytes))
        ]
        work = {"bytes": kv_bytes + 2 * 2 * q.numel(), "flops": 4 * q.numel() * keys}
        name = f"sdpa decode b{batch} kv{keys}"
        yield attention_case(nt, name, "sdpa decode", operands, False, **work, memory_bound=True)
    q = cuda_randn(1, HEADS, PREFILL_ROWS, HEAD_DIM)
    k, v = (cuda_randn(1, KV_HEADS, PREFILL_ROWS, HEAD_DIM) for _ in range(2))
    work = {"bytes": 2 * 2 * (q.numel() + k.numel()), "flops": 2 * q.numel() * PREFILL_ROWS}
    name = f"sdpa prefill causal t{PREFILL_ROWS}"
    yield attention_case(nt, name, "sdpa prefill", [(q, k, v)], True, **work, memory_bound=False)


def kernel_cases(nt):
    yield from linear_cases(nt)
    yield square_case(nt)
    yield from attention_cases(nt)


def kernel_table(nt, effort):
    """Device time of each of the layer's kernels, ours against torch's, with rates."""
    rows = {}
    for case in kernel_cases(nt):
        print(f"kernel {case.name}", file=sys.stderr)
        us = {name: timing["gpu_us"] for name, timing in measure(case.methods, effort).items()}
        unit, work = ("TB/s", case.bytes) if case.memory_bound else ("TFLOP/s", case.flops)
        rows[case.name] = {
            "group": case.group,
            "gpu_us": us,
            "speed": us[TORCH] / us[OURS],
            "unit": unit,
            "rate": {name: work / (time_us * 1e6) for name, time_us in us.items()},
        }
    return rows


def assert_no_compiler():
    """The main process ran ntops_prebuilt (and torch eager) without loading a compiler."""
    loaded = [name for name in ("triton", "ninetoothed") if name in sys.modules]
    if loaded:
        raise AssertionError(f"the main process imported {', '.join(loaded)}")


METHOD = [
    "wall_us: perf_counter around N back-to-back calls with a synchronize at the end, / N",
    "gpu_us: CUDA events around N back-to-back calls (graph replays) queued behind a GPU "
    "sleep longer than the host takes to issue them, / N: device time without host gaps",
    "figures: medians of repeats, the methods taking turns; each result checked first",
    "graph columns: the function captured by hand with torch.cuda.graph after warm-up on a "
    "side stream; torch.compile in default mode (dynamic=False), not reduce-overhead",
    "torch.compile columns: measured in a child process; the main process imported no Triton",
    "ntops torch.compile columns: the ntops_prebuilt layer under torch.compile(fullgraph=True),"
    " its functions torch.library ops in the graph; in the same child process",
    "kernels: operands rotate among copies over 256 MiB, defeating the 50 MB L2",
    "both layers copy the attention output with reshape at prefill (a view at decode)",
]


def print_layer(layer):
    print("\ndecoder layer, Llama-3-8B shapes, bf16: us per layer, wall / GPU")
    print(f"{'scenario':20s}" + "".join(f"{column:>27s}" for column in COLUMNS))
    for name, entry in layer.items():
        timings = entry["timings"]
        cells = [
            f"{timings[column]['wall_us']:.0f} / {timings[column]['gpu_us']:.0f}"
            if column in timings
            else "n/a"
            for column in COLUMNS
        ]
        print(f"{name:20s}" + "".join(f"{cell:>27s}" for cell in cells))


def print_kernels(kernels):
    print("\nkernels: device us (median), speed = torch / ours; torch is F.linear(x, W),")
    print("torch.mm or F.scaled_dot_product_attention; rates in TB/s (decode) or TFLOP/s")
    print(
        f"{'kernel':36s} {'ours':>8s} {'torch':>8s} {'torch.mm':>8s} {'speed':>6s} {'rates':>15s}"
    )
    for name, row in kernels.items():
        us, rate = row["gpu_us"], row["rate"]
        mm = f"{us[TORCH_MM]:8.1f}" if TORCH_MM in us else " " * 8
        rates = f"{rate[OURS]:6.2f} {rate[TORCH]:6.2f} {row['unit']}"
        print(f"{name:36s} {us[OURS]:8.1f} {us[TORCH]:8.1f} {mm} {row['speed']:6.2f}  {rates}")


def summary(report):
    """One line per scenario (graphs by GPU time, eager by wall time), one per kernel group
    (the geometric mean of torch / ours)."""
    lines = []
    pairs = (
        ("ntops graph", "torch.compile graph", "gpu_us"),
        ("ntops torch.compile graph", "torch.compile graph", "gpu_us"),
        ("ntops eager", "torch eager", "wall_us"),
    )
    for name, entry in report["layer"].items():
        timings = entry["timings"]
        for ours, theirs, key in pairs:
            if theirs in timings:
                mine, reference = timings[ours][key], timings[theirs][key]
                lines.append(
                    f"{name}: {ours} {mine:.0f} us vs {theirs} {reference:.0f} us "
                    f"({key[:-3]}), torch / ours {reference / mine:.2f}"
                )
    groups = {}
    for row in report.get("kernels", {}).values():
        groups.setdefault(row["group"], []).append(row["speed"])
    for group, speeds in groups.items():
        lines.append(f"{group}: torch / ours {statistics.geometric_mean(speeds):.2f} (geomean)")
    return lines


def write_png(path, layer):
    """Bars of the layer times, GPU us and wall us, per scenario and column (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, width = list(layer), 0.8 / len(COLUMNS)
    figure, axes = plt.subplots(1, 2, figsize=(15, 5.5))
    for axis, key in zip(axes, ("gpu_us", "wall_us"), strict=True):
        for index, column in enumerate(COLUMNS):
            values = [layer[name]["timings"].get(column, {}).get(key, math.nan) for name in names]
            positions = [slot + index * width for slot in range(len(names))]
            axis.bar(positions, values, width, label=column)
        axis.set_xticks([slot + 0.4 - width / 2 for slot in range(len(names))], names, rotation=15)
        axis.set_yscale("log")
        axis.set_ylabel(f"{key[:-3]} us per layer")
        axis.set_title(f"Llama-3-8B decoder layer, bf16: {key[:-3]} time")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def scenario_list(text):
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(SCENARIOS)}"
        )
    return [SCENARIOS[name] for name in names]


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenarios",
        type=scenario_list,
        default=",".join(SCENARIOS),
        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls and repeats")
    parser.add_argument(
        "--kernels",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the layer's kernels one by one (default: on)",
    )
    parser.add_argument("--json", help="also write every figure here")
    parser.add_argument("--png", help="also draw the layer table here (needs matplotlib)")
    parser.add_argument("--compiled-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def measure_all(args):
    """Every figure: ntops_prebuilt and torch eager here, then torch.compile in a child."""
    import ntops_prebuilt as nt

    nt.preload()  # every kernel loaded now: none may load during graph capture
    effort = QUICK if args.quick else FULL
    weights = make_weights()
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "ntops_prebuilt": nt.manifest().get("version"),
        "toolchain": nt.manifest().get("toolchain"),
        "method": METHOD,
        "layer": {s.name: layer_scenario(nt, weights, s, effort) for s in args.scenarios},
    }
    del weights
    if args.kernels:
        report["kernels"] = kernel_table(nt, effort)
    assert_no_compiler()
    compiled, error = compiled_columns(args.scenarios, args.quick)
    for name, entry in (compiled or {}).items():
        report["layer"][name]["timings"].update(entry["timings"])
        report["layer"][name]["errors"].update(entry["errors"])
    report["failures"] = [error] if error else []
    report["summary"] = summary(report)
    return report


def main():
    args = parse_args()
    if args.compiled_worker:
        compiled_worker(args.scenarios, QUICK if args.quick else FULL)
        return
    report = measure_all(args)
    print(f"device: {report['device']}, torch {report['torch']}, toolchain {report['toolchain']}")
    print_layer(report["layer"])
    if "kernels" in report:
        print_kernels(report["kernels"])
    print("\nsummary:")
    for line in report["summary"] + report["failures"]:
        print(f"  {line}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(report, file, indent=1)
    if args.png:
        write_png(args.png, report["layer"])
    if report["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
