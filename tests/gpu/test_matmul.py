"""Matrix products as models call them: weights in nn.Linear's layout (`x @ w.t()`),
every row count the launcher tells apart (its buckets), and the launches that need
memory of their own (TMA descriptors' scratch, split-K workspaces) under CUDA graph
capture, on several streams and threads at once."""

import pytest
import torch

from tests.gpu.graphs import captured
from tests.gpu.threads import on_streams

HALF = (torch.float16, torch.bfloat16)
LIMIT = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
# Row counts on both sides of every bucket bound of kernels/tuning/products.py, and prefill.
ROWS = (1, 8, 16, 17, 32, 33, 64, 65, 256, 257, 2048)


def relative_error(got, want):
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def bucket_of(nt, op, rows, columns):
    """The op's bucket of these rows and columns, as the wheel declares them."""
    tuning = nt.manifest()["ops"][op]["tuning"]
    for bucket in tuning["buckets"]:
        (low, high), (low2, high2) = bucket["ranges"]
        if low <= rows <= high and low2 <= columns <= high2:
            return bucket["name"]
    raise AssertionError(f"no bucket of {op} takes {rows}x{columns}")


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("rows", ROWS)
def test_linear_layout_in_every_bucket(nt, rows, dtype):
    for k, n in ((4096, 6144), (14336, 4096), (512, 80)):
        x = torch.randn(rows, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
        got = nt.mm(x, w.t())
        ran = nt._C.last_kernel()
        assert relative_error(got, x @ w.t()) < LIMIT[dtype], (rows, k, n, ran)
        spec, label = ran.rsplit("/", 1)[1].split("@")
        assert spec == "i32-u101-a16", ran  # nn.Linear's layout, the TMA-capable kernel
        assert bucket_of(nt, "mm", rows, n) in label.split("+"), ran
        bias = torch.randn(n, device="cuda", dtype=dtype)
        got = nt.addmm(bias, x, w.t())
        want = torch.addmm(bias.float(), x.float(), w.float().t())
        assert relative_error(got, want) < LIMIT[dtype], (rows, k, n, nt._C.last_kernel())


@pytest.mark.parametrize("rows", [1, 40, 100, 2048])
def test_batched_products_with_linear_weights(nt, rows):
    x = torch.randn(3, rows, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3, 768, 1024, device="cuda", dtype=torch.bfloat16) / 32
    assert relative_error(nt.bmm(x, w.mT), x @ w.mT) < 1e-2
    assert relative_error(nt.matmul(x, w[0].t()), x @ w[0].t()) < 1e-2


def test_memory_of_its_own_under_graph_capture(nt):
    """Prefill (TMA: global scratch) and medium (split K: a zeroed workspace) products
    captured in a graph and replayed on fresh inputs, next to eager launches of the
    same kernels on another stream."""
    nt.preload()
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    inputs = [torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16) for m in (1, 100, 2048)]

    def step():
        return [nt.mm(x, w.t()) for x in inputs]

    graph, outputs = captured(step)
    other = torch.cuda.Stream()
    for _ in range(3):
        for x in inputs:
            x.copy_(torch.randn_like(x))
        graph.replay()
        with torch.cuda.stream(other):
            eager = [nt.mm(x.flip(0).contiguous(), w.t()) for x in inputs]
        torch.cuda.synchronize()
        for got, x in zip(outputs, inputs, strict=True):
            assert relative_error(got, x @ w.t()) < 1e-2
        for got, x in zip(eager, inputs, strict=True):
            assert relative_error(got, x.flip(0) @ w.t()) < 1e-2


def test_split_products_on_eight_threads(nt):
    """Split-K launches (each with its own zeroed workspace) from eight threads on eight
    streams: no launch sees another's partial sums."""
    w = torch.randn(1024, 4096, device="cuda", dtype=torch.float16) / 64

    def work(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        for rows in (100, 200, 1, 60) * 10:
            x = torch.randn(rows, 4096, device="cuda", generator=generator).half()
            got = nt.mm(x, w.t())
            assert relative_error(got, x @ w.t()) < 2e-3, (seed, rows)

    on_streams(work)


@pytest.mark.parametrize("rows", [1, 64, 130, 600, 2048])
def test_expanded_operands(nt, rows):
    """A broadcast row (stride 0 over the rows) and a broadcast weight column (stride 0
    over the columns) in every product: Hopper's TMA tiles cannot step by 0 bytes, so
    these calls take the kernels that read by pointer (at 130 rows and more they read
    garbage: 1e23 off); FP8's products too."""
    dtype = torch.bfloat16
    row = torch.randn(1, 4096, device="cuda", dtype=dtype)
    x = row.expand(rows, 4096)
    w = torch.randn(1024, 4096, device="cuda", dtype=dtype) * 0.02
    column = torch.randn(4096, 1, device="cuda", dtype=dtype).expand(4096, 1024)
    rows3, weights3 = row.expand(3, rows, 4096), w.t().expand(3, 4096, 1024)
    checks = {
        "mm": (nt.mm(x, w.t()), x @ w.t()),
        "mm of an expanded weight": (nt.mm(w[:rows], column[:, :512]), w[:rows] @ column[:, :512]),
        "addmm": (nt.addmm(x[:, :1024], x, w.t()), torch.addmm(x[:, :1024], x, w.t())),
        "bmm": (nt.bmm(rows3, weights3), torch.bmm(rows3, weights3)),
        "matmul": (nt.matmul(x, w.t()), x @ w.t()),
    }
    for name, (got, want) in checks.items():
        assert relative_error(got, want) < LIMIT[dtype], name
    if torch.cuda.get_device_capability() < (8, 9):
        return
    e4m3, one = torch.float8_e4m3fn, torch.ones(1, device="cuda")
    x8 = row.to(e4m3).expand(rows, 4096)
    w8 = (w * 16).to(e4m3)
    want = x8.float() @ w8.float().t()
    got = nt.scaled_mm(x8, w8.t(), one, one, out_dtype=dtype)
    assert relative_error(got, want) < LIMIT[dtype], "scaled_mm"
    scales = torch.ones(rows, 32, device="cuda"), torch.ones(8, 32, device="cuda")
    got = nt.w8a8_block_fp8_matmul(x8, w8, *scales, [128, 128], dtype)
    assert relative_error(got, want) < LIMIT[dtype], "w8a8_block_fp8_matmul"
