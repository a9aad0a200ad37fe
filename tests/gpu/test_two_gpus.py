"""Two GPUs of one host: tensors on cuda:1 while the current device stays 0, calls
that mix devices, threads launching on both at once, a CUDA graph captured on cuda:1
and preload() per device. Skipped with fewer than two GPUs."""

import pytest
import torch

from tests.gpu.graphs import captured
from tests.gpu.threads import on_streams


@pytest.fixture
def two(nt):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch.cuda.set_device(0)
    return nt


def test_tensors_on_the_second_gpu_run_there_with_the_current_device_left_at_0(two):
    nt = two
    x, y = (torch.randn(1000, 37, device="cuda:1") for _ in range(2))
    torch.testing.assert_close(nt.add(x, y), x + y)
    a, b = torch.randn(64, 256, device="cuda:1"), torch.randn(96, 256, device="cuda:1")
    torch.testing.assert_close(nt.mm(a, b.t()), a @ b.t(), rtol=1e-2, atol=1e-2)
    q = torch.randn(1, 32, 1, 128, device="cuda:1", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 8, 4096, 128, device="cuda:1", dtype=torch.bfloat16) for _ in "kv")
    got = nt.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # split: workspace on 1
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)
    assert got.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0


def test_calls_that_mix_devices_are_refused_by_name(two):
    nt = two
    x0, x1 = torch.randn(8, device="cuda:0"), torch.randn(8, device="cuda:1")
    with pytest.raises(ValueError, match="add: expected all tensors on one device"):
        nt.add(x0, x1)
    with pytest.raises(ValueError, match="add: expected all tensors on one device"):
        nt.add(x1, x1, out=torch.empty(8, device="cuda:0"))
    a0, a1 = torch.randn(16, 16, device="cuda:0"), torch.randn(16, 16, device="cuda:1")
    with pytest.raises(ValueError, match="mm: expected all tensors on one device"):
        nt.mm(a0, a1)


def test_threads_launch_on_both_gpus_at_once(two):
    nt = two

    def device(seed):
        return f"cuda:{seed % 2}"

    def work(seed):
        for step in range(500):
            x = torch.randn(1000 + seed + step, device=device(seed))
            got = nt.softmax(nt.mul(nt.add(x, x), 0.5), 0)
            torch.testing.assert_close(got, torch.softmax(x, 0))

    on_streams(work, device=device)


def test_preload_per_device_and_a_graph_captured_on_the_second_gpu(two):
    nt = two
    assert nt.preload("cuda:1") > 0
    assert nt.preload(0) > 0
    with torch.cuda.device(1):
        x = torch.randn(6, 42, 123, device="cuda:1", dtype=torch.float16)
        q = torch.randn(1, 32, 1, 128, device="cuda:1", dtype=torch.bfloat16)
        k = torch.randn(1, 8, 2048, 128, device="cuda:1", dtype=torch.bfloat16)

        def step():
            return nt.softmax(nt.gelu(x), -1), nt.scaled_dot_product_attention(
                q, k, k, enable_gqa=True
            )

        graph, (soft, attention) = captured(step)
        for _ in range(3):
            x.copy_(torch.randn_like(x))
            q.copy_(torch.randn_like(q))
            graph.replay()
            torch.cuda.synchronize()
            expected = torch.softmax(torch.nn.functional.gelu(x), -1)
            torch.testing.assert_close(soft, expected, rtol=3e-3, atol=3e-3)
            sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            torch.testing.assert_close(attention, sdpa, rtol=1e-2, atol=1e-2)
    assert torch.cuda.current_device() == 0
