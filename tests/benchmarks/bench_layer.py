"""`make bench-layer`: one decoder layer (bf16) of Llama-3-8B and of Qwen2.5-7B (its
scenarios named qwen7b-...), written once with ntops_prebuilt's functions and once with
torch's, on the same weights and inputs: decode steps over a KV cache, a 512-token prefill
chunk after 4096 cached positions and a 2048-token causal prefill, each timed eager and in
a CUDA graph, against torch eager and torch.compile (alone and in a graph); then the
layers' kernels one by one against torch's, and each decode step against the HBM roof.

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
SEED = 0
CACHE_HEADROOM = 128  # free cache positions past the step's: attended views are strided, as served
ROTATION_BYTES = 256 * 2**20  # over 5x the H100's 50 MB L2
COLUMNS = ("ntops eager", "ntops graph", "torch eager", "torch.compile", "torch.compile graph")
# The ntops_prebuilt layer under torch.compile (its functions are torch.library ops there).
COLUMNS += ("ntops torch.compile", "ntops torch.compile graph")
OURS, TORCH, TORCH_MM = "ntops_prebuilt", "torch", "torch.mm(x, W.t())"
# Product rows: decode's (memory-bound: the weight is the traffic), issue 29's 65-256
# (a decode batch or a small prefill chunk) and a prefill's.
DECODE_ROWS, MIDDLE_ROWS, PREFILL_ROWS = (1, 8, 32, 64), (96, 128, 192, 256), 2048
DECODE_BATCHES, DECODE_KEYS = (1, 8, 32), (1024, 4096, 32768)
# The HBM roof of a decode step: H100 SXM's HBM3, 3.35 TB/s (NVIDIA's datasheet).
HBM_BYTES_PER_S = 3.35e12
ROOF_COLUMNS = ("ntops graph", "torch.compile graph")
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
class Model:
    """A decoder layer's shapes and constants, as the model's config.json gives them."""

    name: str
    prefix: str  # of its scenarios' and kernels' names (Llama-3-8B's keep their old ones)
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    rope_theta: float
    qkv_bias: bool  # Qwen2's q, k and v projections add a bias

    @property
    def q_size(self):
        return self.heads * self.head_dim

    @property
    def kv_size(self):
        return self.kv_heads * self.head_dim

    @property
    def linears(self):
        """The layer's products, fused as Weights keeps them: (in, out) features."""
        return {
            "qkv": (self.hidden, self.q_size + 2 * self.kv_size),
            "o": (self.q_size, self.hidden),
            "gate_up": (self.hidden, 2 * self.intermediate),
            "down": (self.intermediate, self.hidden),
        }


LLAMA_8B = Model(
    name="Llama-3-8B",
    prefix="",
    hidden=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=14336,
    eps=1e-5,
    rope_theta=500000.0,
    qkv_bias=False,
)
QWEN_7B = Model(
    name="Qwen2.5-7B",
    prefix="qwen7b-",
    hidden=3584,
    heads=28,
    kv_heads=4,
    head_dim=128,
    intermediate=18944,
    eps=1e-6,
    rope_theta=1e6,
    qkv_bias=True,
)
# The products benchmark's third model (no layer scenarios run it).
LLAMA_1B = Model(
    name="Llama-3.2-1B",
    prefix="llama1b-",
    hidden=2048,
    heads=32,
    kv_heads=8,
    head_dim=64,
    intermediate=8192,
    eps=1e-5,
    rope_theta=500000.0,
    qkv_bias=False,
)
MODELS = (LLAMA_8B, QWEN_7B)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One layer call: `tokens` new tokens for each of `batch` sequences after `cache_len`
    cached positions; cache_len 0 is a prefill, causal over its own tokens, no cache; more
    than one token after a cache is a prefill chunk, causal from the bottom right."""

    batch: int
    tokens: int
    cache_len: int
    model: Model = LLAMA_8B  # tests/gpu/test_compile.py's scenarios are Llama-3-8B's

    @property
    def decode(self):
        return bool(self.cache_len) and self.tokens == 1

    @property
    def name(self):
        if self.decode:
            kind = f"decode-b{self.batch}-kv{self.cache_len}"
        elif self.cache_len:
            kind = f"chunk-b{self.batch}-t{self.tokens}-kv{self.cache_len}"
        else:
            kind = f"prefill-b{self.batch}-t{self.tokens}"
        return self.model.prefix + kind


SCENARIOS = {
    scenario.name: scenario
    for scenario in (
        Scenario(batch=1, tokens=1, cache_len=4096),
        Scenario(batch=8, tokens=1, cache_len=4096),
        Scenario(batch=64, tokens=1, cache_len=4096),
        Scenario(batch=1, tokens=1, cache_len=32768),
        Scenario(batch=1, tokens=2048, cache_len=0),
        Scenario(batch=128, tokens=1, cache_len=4096),
        Scenario(batch=256, tokens=1, cache_len=4096),
        Scenario(batch=1, tokens=512, cache_len=4096),
        Scenario(batch=1, tokens=1, cache_len=4096, model=QWEN_7B),
        Scenario(batch=64, tokens=1, cache_len=4096, model=QWEN_7B),
        Scenario(batch=256, tokens=1, cache_len=4096, model=QWEN_7B),
        Scenario(batch=1, tokens=1, cache_len=32768, model=QWEN_7B),
        Scenario(batch=1, tokens=512, cache_len=4096, model=QWEN_7B),
        Scenario(batch=1, tokens=2048, cache_len=0, model=QWEN_7B),
    )
}
# --quick's default: the five scenarios there were before issue 29, a large decode batch,
# the chunk, and Qwen's long decode.
QUICK_SCENARIOS = (
    "decode-b1-kv4096",
    "decode-b8-kv4096",
    "decode-b64-kv4096",
    "decode-b1-kv32768",
    "prefill-b1-t2048",
    "decode-b128-kv4096",
    "chunk-b1-t512-kv4096",
    "qwen7b-decode-b1-kv32768",
)


@dataclasses.dataclass(frozen=True)
class Weights:
    """One layer's parameters in nn.Linear layout (out, in), fused as serving stacks keep
    them: q, k and v rows in one matrix (and one bias, where the model has it), gate rows
    then up rows in another; and the model they are of, which the layer functions read."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    qkv_bias: torch.Tensor | None
    model: Model


@dataclasses.dataclass(frozen=True)
class Step:
    """A layer call's inputs: hidden states (batch, seq, hidden), the rotary tables of its
    positions, (seq, head_dim / 2) for ntops_prebuilt and (seq, head_dim) for rotate_half,
    both made once per step as a model's rotary embedding does for all its layers, and for
    a decode step or a prefill chunk the KV cache and the position its tokens go to. A
    chunk's torch attention needs a mask, made once per step as a model makes it: query i
    sees the cache and the chunk's first i + 1 tokens (causal from the bottom right;
    is_causal's diagonal starts at the top left)."""

    x: torch.Tensor
    rope_half: tuple
    rope_full: tuple
    k_cache: torch.Tensor | None
    v_cache: torch.Tensor | None
    pos: int
    mask: torch.Tensor | None = None

    def with_own_cache(self):
        """The same step on a copy of the cache: each layer writes its own."""
        if self.k_cache is None:
            return self
        return dataclasses.replace(self, k_cache=self.k_cache.clone(), v_cache=self.v_cache.clone())


def randn(generator, *shape, scale=1.0):
    return torch.randn(shape, generator=generator, device="cuda", dtype=BF16) * scale


def make_weights(model=LLAMA_8B):
    """`model`'s weights from SEED, so the child process builds the same ones (Llama-3-8B's
    unless told: tests/gpu/test_compile.py builds those). randn * 0.02 keeps every
    activation near unit scale (0.02 * sqrt(4096) = 1.3), the output well conditioned; a
    bias of 0.1 moves q, k and v by about 8%, which a check would see were it dropped."""
    generator = torch.Generator("cuda").manual_seed(SEED)

    def matrix(rows, columns):
        return randn(generator, rows, columns, scale=0.02)

    def norm():
        return 1 + randn(generator, model.hidden, scale=0.1)

    qkv_rows = model.q_size + 2 * model.kv_size
    return Weights(
        input_norm=norm(),
        qkv=matrix(qkv_rows, model.hidden),
        o=matrix(model.hidden, model.q_size),
        post_norm=norm(),
        gate_up=matrix(2 * model.intermediate, model.hidden),
        down=matrix(model.hidden, model.intermediate),
        qkv_bias=randn(generator, qkv_rows, scale=0.1) if model.qkv_bias else None,
        model=model,
    )


def make_step(scenario):
    """The scenario's inputs from SEED + 1: random hidden states and cache contents."""
    model = scenario.model
    generator = torch.Generator("cuda").manual_seed(SEED + 1)
    x = randn(generator, scenario.batch, scenario.tokens, model.hidden)
    caches, mask = (None, None), None
    if scenario.cache_len:
        length = scenario.cache_len + scenario.tokens + CACHE_HEADROOM
        shape = (scenario.batch, model.kv_heads, length, model.head_dim)
        caches = (randn(generator, *shape), randn(generator, *shape))
    if scenario.cache_len and scenario.tokens > 1:
        keys = scenario.cache_len + scenario.tokens
        mask = torch.ones(scenario.tokens, keys, dtype=torch.bool, device="cuda")
        mask = mask.tril(scenario.cache_len)  # query i: keys up to cache_len + i
    positions = torch.arange(scenario.cache_len, scenario.cache_len + scenario.tokens)
    inverse = model.rope_theta ** -(torch.arange(0, model.head_dim, 2) / model.head_dim)
    angles = (positions[:, None] * inverse).cuda()
    half = (angles.sin().to(BF16), angles.cos().to(BF16))
    full = tuple(torch.cat((table, table), -1) for table in half)
    return Step(x, half, full, *caches, pos=scenario.cache_len, mask=mask)


def rotate_half(x):
    first, second = x.chunk(2, -1)
    return torch.cat((-second, first), -1)


def torch_attention(weights, step):
    """The attention half of the layer in torch, as Hugging Face's Llama and Qwen2 write it
    (fused projections), up to the output projection: (batch, seq, heads * head_dim)."""
    model = weights.model
    batch, seq, _ = step.x.shape
    h = F.rms_norm(step.x, (model.hidden,), weights.input_norm, model.eps)
    qkv = F.linear(h, weights.qkv, weights.qkv_bias)
    q, k, v = qkv.split((model.q_size, model.kv_size, model.kv_size), -1)
    q = q.view(batch, seq, model.heads, model.head_dim).transpose(1, 2)
    k = k.view(batch, seq, model.kv_heads, model.head_dim).transpose(1, 2)
    v = v.view(batch, seq, model.kv_heads, model.head_dim).transpose(1, 2)
    sin, cos = step.rope_full
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    if step.k_cache is None:
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        end = step.pos + seq
        step.k_cache[:, :, step.pos : end] = k
        step.v_cache[:, :, step.pos : end] = v
        keys, values = step.k_cache[:, :, :end], step.v_cache[:, :, :end]
        attention = F.scaled_dot_product_attention(q, keys, values, step.mask, enable_gqa=True)
    return attention.transpose(1, 2).reshape(batch, seq, model.q_size)


def torch_layer(weights, step):
    """The layer in torch: attention, output projection, residual, SwiGLU MLP, residual."""
    model = weights.model
    x = step.x + F.linear(torch_attention(weights, step), weights.o)
    h = F.rms_norm(x, (model.hidden,), weights.post_norm, model.eps)
    gate, up = F.linear(h, weights.gate_up).chunk(2, -1)
    return x + F.linear(F.silu(gate) * up, weights.down)


def ntops_attention(nt, weights, step):
    """torch_attention in ntops_prebuilt's functions, on (batch * seq, hidden) rows. The one
    torch kernel left is the copy `reshape` makes of the attention output at prefill, as in
    torch_attention; at decode it is a view. The queries and keys lie side by side in the
    fused projection's rows: one in-place rotation turns both. Qwen2's bias rides on the
    product (addmm, the bias broadcast over the rows). A chunk after cached positions is
    causal from the bottom right; a decode step's one query sees every key, unmasked."""
    model = weights.model
    batch, seq, _ = step.x.shape
    rows = step.x.view(batch * seq, model.hidden)
    h = nt.rms_norm(rows, (model.hidden,), weights.input_norm, model.eps)
    if weights.qkv_bias is None:
        qkv = nt.mm(h, weights.qkv.t())
    else:
        qkv = nt.addmm(weights.qkv_bias, h, weights.qkv.t())
    sin, cos = step.rope_half
    rotated = model.q_size + model.kv_size
    heads = qkv[:, :rotated].view(batch, seq, model.heads + model.kv_heads, model.head_dim)
    nt.rotary_position_embedding(heads, sin, cos, interleaved=False, inplace=True)
    q, k = heads.split((model.heads, model.kv_heads), 2)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = qkv[:, rotated:].view(batch, seq, model.kv_heads, model.head_dim).transpose(1, 2)
    sdpa = nt.scaled_dot_product_attention
    if step.k_cache is None:
        attention = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    else:
        end = step.pos + seq
        lower_right = {"is_causal": True, "causal_variant": nt.CausalVariant.LOWER_RIGHT}
        causal = lower_right if seq > 1 else {}
        attention = sdpa(
            q,
            step.k_cache[:, :, :end],
            step.v_cache[:, :, :end],
            enable_gqa=True,
            present_key=k,
            present_value=v,
            present_key_slot=step.k_cache[:, :, step.pos : end],
            present_value_slot=step.v_cache[:, :, step.pos : end],
            **causal,
        )
    return attention.transpose(1, 2).reshape(batch * seq, model.q_size)


def ntops_layer(nt, weights, step):
    """torch_layer in ntops_prebuilt's functions; the residual adds ride on the products
    (addmm with the residual as its input)."""
    model = weights.model
    rows = step.x.view(-1, model.hidden)
    x = nt.addmm(rows, ntops_attention(nt, weights, step), weights.o.t())
    h = nt.rms_norm(x, (model.hidden,), weights.post_norm, model.eps)
    h = nt.mm(h, weights.gate_up.t())
    mlp = nt.silu_mul(h[:, : model.intermediate], h[:, model.intermediate :])
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
    heads = (-1, weights.model.heads, weights.model.head_dim)
    ours_heads = ntops_attention(nt, weights, ours).view(heads)
    reference = torch_attention(weights, theirs).reshape(heads)
    error = check(f"{name} attention", ours_heads, reference, ATTENTION_TOLERANCE)
    if ours.k_cache is not None:
        written = slice(ours.pos, ours.pos + ours.x.shape[1])
        for label, mine, cache in (
            ("k", ours.k_cache, theirs.k_cache),
            ("v", ours.v_cache, theirs.v_cache),
        ):
            check(f"{name} {label} cache", mine[:, :, written], cache[:, :, written])
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


def model_weights(scenarios):
    """The weights of each model `scenarios` run, by model."""
    return {model: make_weights(model) for model in dict.fromkeys(s.model for s in scenarios)}


def step_bytes(weights, scenario):
    """The least a step moves through HBM: every weight of the layer once, the keys and
    values it attends (its own new entries among them), the hidden states in and out."""
    model = weights.model
    tensors = [getattr(weights, field.name) for field in dataclasses.fields(weights)]
    weight = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    keys = scenario.cache_len + scenario.tokens
    cache = 2 * scenario.batch * model.kv_heads * keys * model.head_dim
    hidden = 2 * scenario.batch * scenario.tokens * model.hidden
    return weight + (cache + hidden) * BF16.itemsize


def layer_scenario(nt, weights, scenario, effort):
    """The three main-process columns of one scenario, each checked against torch eager;
    a decode step's HBM bytes beside them."""
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
    about = {**dataclasses.asdict(scenario), "model": scenario.model.name}
    entry = {"scenario": about, "timings": timings, "errors": errors}
    if scenario.decode:
        entry["hbm_bytes"] = step_bytes(weights, scenario)
    return entry


def compiled_worker(scenarios, effort):
    """--compiled-worker: the torch.compile columns, as one JSON line on stdout. Default mode
    (dynamic=False: each scenario's shapes are static, as a graph's are), then captured by
    hand in a CUDA graph, as the ntops_prebuilt graph is. Both layers are compiled: torch's,
    and ntops_prebuilt's with fullgraph=True (its functions are ops in the graph, its
    kernels launched by the ops; Inductor fuses around them)."""
    import ntops_prebuilt as nt

    nt.preload()
    models = model_weights(scenarios)
    results = {}
    for scenario in scenarios:
        print(f"torch.compile {scenario.name}", file=sys.stderr)
        weights = models[scenario.model]
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


def linear_group(rows):
    """The kernel-table group of a product of `rows` rows."""
    if rows in DECODE_ROWS:
        return "decode"
    return f"{MIDDLE_ROWS[0]}-{MIDDLE_ROWS[-1]} rows" if rows in MIDDLE_ROWS else "prefill"


def linear_cases(nt, model):
    """The layer's products x @ W.t(), W in nn.Linear layout, at decode rows (memory-bound:
    the weight is the traffic), 96 to 256 rows and prefill rows; torch's is F.linear(x, W)."""
    for label, (inner, outer) in model.linears.items():
        weights = [cuda_randn(outer, inner, scale=0.02) for _ in range(rotation(2 * outer * inner))]
        for rows in (*DECODE_ROWS, *MIDDLE_ROWS, PREFILL_ROWS):
            x = cuda_randn(rows, inner)
            name = f"{model.prefix}linear {label} M={rows} ({inner}->{outer})"
            check(name, nt.mm(x, weights[0].t()), F.linear(x, weights[0]))
            transposed = [(x, weight.t()) for weight in weights]
            methods = {
                OURS: rotating(nt.mm, transposed),
                TORCH: rotating(F.linear, [(x, weight) for weight in weights]),
                TORCH_MM: rotating(torch.mm, transposed),
            }
            yield Case(
                name,
                f"{model.prefix}linear {linear_group(rows)}",
                methods,
                bytes=2 * (outer * inner + rows * (inner + outer)),
                flops=2 * rows * inner * outer,
                memory_bound=rows in DECODE_ROWS,
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


def decode_attention_case(nt, model, batch, keys):
    """One query per sequence over its keys: memory-bound, the caches rotating."""
    q = cuda_randn(batch, model.heads, 1, model.head_dim)
    kv_shape = (batch, model.kv_heads, keys, model.head_dim)
    kv_bytes = 2 * 2 * math.prod(kv_shape)
    operands = [
        (q, cuda_randn(*kv_shape), cuda_randn(*kv_shape)) for _ in range(rotation(kv_bytes))
    ]
    work = {"bytes": kv_bytes + 2 * 2 * q.numel(), "flops": 4 * q.numel() * keys}
    name, group = f"{model.prefix}sdpa decode b{batch} kv{keys}", f"{model.prefix}sdpa decode"
    return attention_case(nt, name, group, operands, False, **work, memory_bound=True)


def prefill_attention_case(nt, name, group, shape, kv_heads, is_causal):
    """Queries of `shape` (batch, heads, seq, head_dim) over as many keys: compute-bound,
    half the score matrix when causal."""
    q = cuda_randn(*shape)
    batch, _, seq, head_dim = shape
    k, v = (cuda_randn(batch, kv_heads, seq, head_dim) for _ in range(2))
    flops = (2 if is_causal else 4) * q.numel() * seq
    work = {"bytes": 2 * 2 * (q.numel() + k.numel()), "flops": flops, "memory_bound": False}
    return attention_case(nt, name, group, [(q, k, v)], is_causal, **work)


def attention_cases(nt):
    """Decode, Llama's then Qwen's longest at batch 1 and 8; then prefill: causal, as a
    model's, and non-causal, grouped (Llama's 32 over 8) and not (32 over 32)."""
    for batch, keys in itertools.product(DECODE_BATCHES, DECODE_KEYS):
        yield decode_attention_case(nt, LLAMA_8B, batch, keys)
    for batch in (1, 8):
        yield decode_attention_case(nt, QWEN_7B, batch, 32768)
    heads, kv_heads, head_dim = LLAMA_8B.heads, LLAMA_8B.kv_heads, LLAMA_8B.head_dim
    causal = f"sdpa prefill causal t{PREFILL_ROWS}"
    shape = (1, heads, PREFILL_ROWS, head_dim)
    yield prefill_attention_case(nt, causal, "sdpa prefill", shape, kv_heads, True)
    group = "sdpa prefill non-causal"
    name = f"sdpa prefill non-causal t{PREFILL_ROWS}"
    yield prefill_attention_case(nt, name, group, shape, kv_heads, False)
    name = f"sdpa prefill non-causal b4 t4096 {heads}/{heads} heads"
    yield prefill_attention_case(nt, name, group, (4, heads, 4096, head_dim), heads, False)


def kernel_cases(nt):
    for model in MODELS:
        yield from linear_cases(nt, model)
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
    "a prefill chunk's attention is causal from the bottom right: ntops_prebuilt's by "
    "causal_variant LOWER_RIGHT, torch's by a bool mask made once per step",
    "HBM roof of a decode step: the bytes it must move (every weight of the layer, the keys "
    "and values attended, the hidden states in and out) / HBM_BYTES_PER_S (H100 SXM)",
]


def print_layer(layer):
    print("\ndecoder layers, bf16, Llama-3-8B (qwen7b-: Qwen2.5-7B): us per layer, wall / GPU")
    print(f"{'scenario':28s}" + "".join(f"{column:>27s}" for column in COLUMNS))
    for name, entry in layer.items():
        timings = entry["timings"]
        cells = [
            f"{timings[column]['wall_us']:.0f} / {timings[column]['gpu_us']:.0f}"
            if column in timings
            else "n/a"
            for column in COLUMNS
        ]
        print(f"{name:28s}" + "".join(f"{cell:>27s}" for cell in cells))


def hbm_roofs(layer):
    """Each decode scenario against the HBM roof: its bytes, the time they take at
    HBM_BYTES_PER_S, and the TB/s the graphs reach by GPU time."""
    roofs = {}
    for name, entry in layer.items():
        if "hbm_bytes" not in entry:
            continue
        nbytes, timings = entry["hbm_bytes"], entry["timings"]
        roofs[name] = {
            "bytes": nbytes,
            "roof_us": nbytes / HBM_BYTES_PER_S * 1e6,
            "tb_per_s": {
                column: nbytes / (timings[column]["gpu_us"] * 1e6)
                for column in ROOF_COLUMNS
                if column in timings
            },
        }
    return roofs


def print_roofs(roofs):
    print(f"\ndecode steps against the HBM roof ({HBM_BYTES_PER_S / 1e12:.2f} TB/s, H100 SXM):")
    print("MB the step must move, their time at the roof, and the TB/s reached by GPU time")
    print(
        f"{'scenario':28s} {'MB':>8s} {'roof us':>8s}" + "".join(f"{c:>22s}" for c in ROOF_COLUMNS)
    )
    for name, roof in roofs.items():
        rates = [roof["tb_per_s"].get(column) for column in ROOF_COLUMNS]
        cells = "".join("n/a".rjust(22) if r is None else f"{r:22.2f}" for r in rates)
        print(f"{name:28s} {roof['bytes'] / 1e6:8.0f} {roof['roof_us']:8.1f}{cells}")


def print_kernels(kernels):
    print("\nkernels: device us (median), speed = torch / ours; torch is F.linear(x, W),")
    print("torch.mm or F.scaled_dot_product_attention; rates in TB/s (decode) or TFLOP/s")
    print(
        f"{'kernel':44s} {'ours':>8s} {'torch':>8s} {'torch.mm':>8s} {'speed':>6s} {'rates':>15s}"
    )
    for name, row in kernels.items():
        us, rate = row["gpu_us"], row["rate"]
        mm = f"{us[TORCH_MM]:8.1f}" if TORCH_MM in us else " " * 8
        rates = f"{rate[OURS]:6.2f} {rate[TORCH]:6.2f} {row['unit']}"
        print(f"{name:44s} {us[OURS]:8.1f} {us[TORCH]:8.1f} {mm} {row['speed']:6.2f}  {rates}")


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
    figure, axes = plt.subplots(1, 2, figsize=(max(15, 2 * len(names)), 6))
    for axis, key in zip(axes, ("gpu_us", "wall_us"), strict=True):
        for index, column in enumerate(COLUMNS):
            values = [layer[name]["timings"].get(column, {}).get(key, math.nan) for name in names]
            positions = [slot + index * width for slot in range(len(names))]
            axis.bar(positions, values, width, label=column)
        axis.set_xticks([slot + 0.4 - width / 2 for slot in range(len(names))], names, rotation=30)
        axis.set_yscale("log")
        axis.set_ylabel(f"{key[:-3]} us per layer")
        axis.set_title(f"decoder layers (qwen7b-: Qwen2.5-7B), bf16: {key[:-3]} time")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def names(table):
    """An argparse type: comma-separated keys of `table`, their values in order."""

    def parse(text):
        keys = [key.strip() for key in text.split(",") if key.strip()]
        unknown = [key for key in keys if key not in table]
        if unknown or not keys:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(table)}"
            )
        return [table[key] for key in keys]

    return parse


scenario_list = names(SCENARIOS)


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenarios",
        type=scenario_list,
        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all; with --quick, "
        f"{', '.join(QUICK_SCENARIOS)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer calls and repeats, and fewer scenarios"
    )
    parser.add_argument(
        "--kernels",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the layer's kernels one by one (default: on)",
    )
    parser.add_argument("--json", help="also write every figure here")
    parser.add_argument("--png", help="also draw the layer table here (needs matplotlib)")
    parser.add_argument("--compiled-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenarios is None:
        args.scenarios = scenario_list(",".join(QUICK_SCENARIOS if args.quick else SCENARIOS))
    return args


def provenance(nt):
    """What a report's figures were measured on: the GPU, torch, the wheel."""
    return {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "ntops_prebuilt": nt.manifest().get("version"),
        "toolchain": nt.manifest().get("toolchain"),
    }


def measure_all(args):
    """Every figure: ntops_prebuilt and torch eager here, then torch.compile in a child."""
    import ntops_prebuilt as nt

    nt.preload()  # every kernel loaded now: none may load during graph capture
    effort = QUICK if args.quick else FULL
    weights = model_weights(args.scenarios)
    report = {
        **provenance(nt),
        "method": METHOD,
        "layer": {s.name: layer_scenario(nt, weights[s.model], s, effort) for s in args.scenarios},
    }
    del weights
    if args.kernels:
        report["kernels"] = kernel_table(nt, effort)
    assert_no_compiler()
    compiled, error = compiled_columns(args.scenarios, args.quick)
    for name, entry in (compiled or {}).items():
        report["layer"][name]["timings"].update(entry["timings"])
        report["layer"][name]["errors"].update(entry["errors"])
    report["roofs"] = hbm_roofs(report["layer"])
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
    if report["roofs"]:
        print_roofs(report["roofs"])
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
