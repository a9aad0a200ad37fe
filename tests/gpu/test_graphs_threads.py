"""Launches captured into CUDA graphs and replayed, and many threads launching at once."""

import subprocess
import sys

import torch

from tests.gpu.graphs import captured
from tests.gpu.threads import on_streams


def test_cuda_graph_capture_and_replay(nt):
    assert nt.preload() > 0
    x = torch.randn(6, 42, 123, device="cuda", dtype=torch.float16)
    y = torch.randn(6, 42, 123, device="cuda", dtype=torch.float16)
    w = torch.randn(123, device="cuda", dtype=torch.float16)
    a, b = torch.randn(64, 96, device="cuda"), torch.randn(96, 80, device="cuda")

    def step():
        s = nt.add(x, y, alpha=0.5)
        return nt.softmax(nt.gelu(s), -1), nt.rms_norm(nt.mul(s, y), (123,), w), nt.mm(a, b)

    graph, outputs = captured(step)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        y.copy_(torch.randn_like(y))
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize()
        s = torch.add(x, y, alpha=0.5)
        expected = (
            torch.softmax(torch.nn.functional.gelu(s), -1),
            torch.nn.functional.rms_norm((s * y).float(), (123,), w.float()).half(),
            a @ b,
        )
        for got, want in zip(outputs, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=3e-3, atol=3e-3)


def test_eight_threads_launch_at_once(nt):
    def work(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        for _ in range(50):
            x = torch.randn(1000 + seed, device="cuda", generator=generator)
            y = torch.randn(1000 + seed, device="cuda", generator=generator)
            got = nt.softmax(nt.add(nt.mul(x, y), x), 0)
            torch.testing.assert_close(got, torch.softmax(x * y + x, 0))

    on_streams(work)


def test_split_attention_replays_in_a_graph(nt):
    """Decode attention splits the keys and merges the parts through counters tagged
    with the launch's id: a graph replays that id, so each replay must find the
    counters its last run cleared."""
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)

    def step():
        return nt.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    graph, out = captured(step)
    for _ in range(3):
        q.copy_(torch.randn_like(q))
        k.copy_(torch.randn_like(k))
        graph.replay()
        torch.cuda.synchronize()
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)


def test_launch_memory_kept_per_stream_stays_apart(nt):
    """Split decode's workspace is kept between launches per stream (up to 16 streams,
    the least recently used given back): 20 streams in turn, each with a decode whose
    keys grow (the kept block outgrown and taken anew), never share one, and a graph
    captured between them keeps its own."""
    streams = [torch.cuda.Stream() for _ in range(20)]
    cases = []
    for n, stream in enumerate(streams):
        keys = 512 * (1 + n % 5)
        q = torch.randn(2, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(2, 8, keys, 128, device="cuda", dtype=torch.bfloat16) for _ in "kv")
        cases.append((stream, q, k, v))
    torch.cuda.synchronize()
    for round in range(3):
        outs = []
        for stream, q, k, v in cases:
            with torch.cuda.stream(stream):
                outs.append(nt.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        if round == 1:
            graph, out = captured(
                lambda: nt.scaled_dot_product_attention(*cases[0][1:], enable_gqa=True)
            )
            graph.replay()
            outs[0] = out
        torch.cuda.synchronize()
        for (_, q, k, v), out in zip(cases, outs, strict=True):
            expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)


def _random_launch(nt, rng, dtype):
    """One launch of a random op and shape, and torch's result for it: element-wise
    with broadcasting, rows, products (split K at small M), split attention."""

    def randn(*shape):
        return torch.randn(shape, device="cuda").to(dtype)

    kind = rng.randrange(6)
    if kind == 0:
        shape = [rng.randint(1, 70) for _ in range(rng.randint(1, 3))]
        x, y = randn(*shape), randn(*shape[rng.randrange(len(shape)) :])
        return nt.add(x, y, alpha=0.5), torch.add(x, y, alpha=0.5)
    if kind == 1:
        x = randn(rng.randint(1, 40), rng.randint(1, 2000))
        return nt.softmax(x, -1), torch.softmax(x.float(), -1).to(dtype)
    if kind == 2:
        x, w = randn(rng.randint(1, 40), 512), randn(512)
        return nt.rms_norm(x, (512,), w, 1e-6), torch.nn.functional.rms_norm(
            x.float(), (512,), w.float(), 1e-6
        ).to(dtype)
    if kind == 3:
        x, y = randn(rng.randint(1, 90), 777), randn(777, 777)
        return nt.silu_mul(x, y[: x.shape[0]]), torch.nn.functional.silu(x) * y[: x.shape[0]]
    if kind == 4:
        a = randn(rng.randint(1, 16), rng.choice((512, 4096)))
        b = randn(rng.randint(1, 300), a.shape[1]).t()
        return nt.mm(a, b), (a.float() @ b.float()).to(dtype)
    q = randn(rng.randint(1, 2), 8, 1, 64)
    seq_kv = rng.choice((1, 77, 1000, 2049, 3000))  # torch's cuDNN plans each length anew
    k, v = (randn(q.shape[0], 2, seq_kv, 64) for _ in range(2))
    # Written out in fp32: torch's cuDNN attention failed when threads called it at once
    # (H100, torch 2.11: "mha_graph.execute ... is_good()").
    keys, values = (t.float().repeat_interleave(4, dim=1) for t in (k, v))
    weights = (q.float() @ keys.transpose(-1, -2) / 8.0).softmax(-1)
    return nt.scaled_dot_product_attention(q, k, v, enable_gqa=True), (weights @ values).to(dtype)


def test_eight_threads_ten_thousand_random_launches_each(nt):
    """8 threads, each on its own stream, 10,000 launches of random ops and shapes
    (split-K products and split attention among them, whose workspaces and counters
    must not mix between streams); every result checked against torch's, computed
    on the same stream. The errors stay on the GPU until the end."""
    import random

    launches = 10_000
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float32: 1e-3}
    worst = [None] * 8

    def work(seed):
        rng = random.Random(seed)
        excess = []
        for _ in range(launches):
            dtype = rng.choice(tuple(tolerance))
            got, want = _random_launch(nt, rng, dtype)
            bound = tolerance[dtype] * (1 + want.float().abs())
            excess.append(((got.float() - want.float()).abs() - bound).amax())
        worst[seed] = torch.stack(excess)

    on_streams(work)
    for seed, excess in enumerate(worst):
        assert excess.numel() == launches
        bad = (excess > 0).nonzero().flatten().tolist()
        assert not bad, f"thread {seed}: launches {bad[:10]} out of tolerance"


FIRST_USE_IN_CAPTURE = """
import torch, ntops_prebuilt as nt
x = torch.randn(6, 42, 123, device="cuda", dtype=torch.float16)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
graphs = [torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()]
# The wheel's first call ever: the device's set-up and gelu's module load, captured.
with torch.cuda.graph(graphs[0], stream=side):
    y = nt.gelu(x)
torch.randn(3, device="cuda")  # torch's CUDA generator still works
# Another kernel's first use, once the device is set up.
with torch.cuda.graph(graphs[1], stream=side):
    z = nt.softmax(y, -1)
for _ in range(2):
    x.copy_(torch.randn_like(x))
    for graph in graphs:
        graph.replay()
    torch.cuda.synchronize()
    expected = torch.nn.functional.gelu(x)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(z, torch.softmax(expected, -1))
print("ok")
"""


def test_a_first_use_inside_a_capture_loads_without_breaking_it(nt):
    """A process whose first calls happen inside torch.cuda.graph captures (no preload,
    no warm-up): the device's set-up and the module loads do not invalidate the captures
    or leave torch's CUDA generator broken; the graphs replay the right results. In a
    process of its own: the failure this guards against damages the process's torch."""
    said = subprocess.run(
        [sys.executable, "-c", FIRST_USE_IN_CAPTURE], capture_output=True, text=True, check=False
    )
    assert said.returncode == 0, said.stderr[-3000:]
    assert said.stdout.strip().endswith("ok")
