"""Launches captured into CUDA graphs and replayed, and many threads launching at once."""

import threading

import torch

from tests.gpu.graphs import captured


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
    errors = []
    start = threading.Barrier(8)

    def work(seed):
        try:
            generator = torch.Generator(device="cuda").manual_seed(seed)
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                start.wait()
                for _ in range(50):
                    x = torch.randn(1000 + seed, device="cuda", generator=generator)
                    y = torch.randn(1000 + seed, device="cuda", generator=generator)
                    got = nt.softmax(nt.add(nt.mul(x, y), x), 0)
                    torch.testing.assert_close(got, torch.softmax(x * y + x, 0))
            stream.synchronize()
        except Exception as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


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
