"""sample and sampling on the GPU: draws tested by their distribution (Pearson's
chi-square against the exact filtered distribution, `_sampling_reference.probabilities`,
over 10^5 draws at a small vocabulary and at Llama-3's 128256), greedy rows exactly,
reproducibility under torch.manual_seed and a torch.Generator, fresh draws on each
replay of a CUDA graph, torch.compile, and bad input refused before any launch."""

import importlib

import pytest
import torch

from tests.ops.sampling import chi_square_p, distinct, references

pytestmark = pytest.mark.gpu

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# (temperature, top_k, top_p, min_p): each filter alone, and together.
FILTERS = [
    (1.0, None, None, None),
    (0.6, None, None, None),
    (1.0, 20, None, None),
    (1.0, None, 0.9, None),
    (1.0, None, None, 0.1),
    (0.8, 30, 0.85, None),
    (1.2, 40, 0.7, 0.02),
]


def _chances(logits, temperature, top_k, top_p, min_p):
    return references().probabilities(
        logits,
        temperature=temperature,
        top_k=top_k or 0,
        top_p=1.0 if top_p is None else top_p,
        min_p=min_p or 0.0,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vocabulary", [50, 128256])
@pytest.mark.parametrize("filters", FILTERS, ids=str)
def test_draws_follow_the_filtered_distribution(nt, dtype, vocabulary, filters):
    torch.manual_seed(vocabulary)
    draws = 100_000
    # a peaked row at 128256 (a model's logits: a few hundred tokens matter)
    scale = 1.5 if vocabulary <= 64 else 4.0
    row = (torch.randn(vocabulary, device="cuda") * scale).to(dtype)
    logits = row.expand(draws, vocabulary)
    temperature, top_k, top_p, min_p = filters
    tokens = nt.sample(logits, temperature, top_k, top_p, min_p)
    assert tokens.shape == (draws,)
    assert tokens.dtype == torch.int64
    chances = _chances(row[None], *filters)[0]
    assert chi_square_p(tokens, chances) > 1e-4


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("survivors", [True, False], ids=["survivors", "rounds"])
@pytest.mark.parametrize(
    "filters",
    # top-k's 30 and 1000, min-p's 60 or so, min-p's 5000 (more than the buffer's 1024:
    # the rounds after all)
    [
        (0.8, 30, 0.85, None),
        (1.0, 1000, 0.95, None),
        (1.2, None, 0.7, 0.02),
        (1.0, None, 0.9, 1e-4),
    ],
    ids=str,
)
def test_top_p_after_a_bound_either_way(nt, monkeypatch, dtype, survivors, filters):
    """Top-p after top-k or min-p over the bound's survivors (sorted, the build
    "nucleus") and by rejection rounds (the build "rows"), whichever the runtime would
    take at these rows (`over_survivors`): the same distribution at 128256 logits."""
    runtime = importlib.import_module(f"{nt.__name__}._sampling")
    monkeypatch.setattr(runtime, "over_survivors", lambda logits, selecting: survivors)
    torch.manual_seed(2)
    draws, vocabulary = 100_000, 128256
    row = (torch.randn(vocabulary, device="cuda") * 4.0).to(dtype)
    tokens = nt.sample(row.expand(draws, vocabulary), *filters)
    assert chi_square_p(tokens, _chances(row[None], *filters)[0]) > 1e-4


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_row_parameters(nt, dtype):
    """Half the rows one set of parameters, half another, and a greedy quarter, as
    tensors: each half draws from its own distribution."""
    torch.manual_seed(1)
    vocabulary, draws = 64, 40_000
    row = (torch.randn(vocabulary, device="cuda") * 1.5).to(dtype)
    logits = row.expand(2 * draws, vocabulary)
    first, second = (0.7, 8, 0.9, 0.0), (1.3, 0, 0.6, 0.05)
    columns = list(zip(first, second, strict=True))
    temperature = torch.tensor(columns[0], device="cuda").repeat_interleave(draws)
    top_k = torch.tensor(columns[1], device="cuda", dtype=torch.int32).repeat_interleave(draws)
    top_p = torch.tensor(columns[2], device="cuda").repeat_interleave(draws)
    min_p = torch.tensor(columns[3], device="cuda").repeat_interleave(draws)
    temperature[-draws // 2 :] = 0.0
    tokens = nt.sample(logits, temperature, top_k, top_p, min_p)
    for half, parameters in ((tokens[:draws], first), (tokens[draws : -draws // 2], second)):
        t, k, p, q = parameters
        chances = _chances(row[None], t, k, p, q)[0]
        assert chi_square_p(half, chances) > 1e-4, parameters
    assert torch.all(tokens[-draws // 2 :] == row.float().argmax())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vocabulary", [1, 7, 4096, 4097, 128256])
def test_greedy_is_the_first_argmax(nt, dtype, vocabulary):
    """temperature 0 and top-k 1: torch.argmax, ties and NaN included."""
    torch.manual_seed(2)
    logits = torch.randn(9, vocabulary, device="cuda").to(dtype)
    if vocabulary > 8:
        logits[1, 3] = logits[1, 5] = logits[1].max() + 1  # a tie: the first
        logits[2, vocabulary - 1] = float("nan")  # NaN is the maximum
        logits[3, 7] = float("inf")
        logits[4] = float("-inf")
    for call in ({"temperature": 0.0}, {"top_k": 1}, {"temperature": 0.0, "top_p": 0.5}):
        tokens = nt.sample(logits, **call)
        assert torch.equal(tokens, logits.argmax(-1)), call


def test_only_the_argmax_passes_a_tiny_top_p(nt):
    """The draw, the rejections and the bound all run, and one answer is right."""
    logits = distinct(16, 256, torch.bfloat16)
    for call in ({"top_p": 1e-9}, {"min_p": 1.0}, {"top_k": 5, "top_p": 1e-9}):
        assert torch.equal(nt.sample(logits, **call), logits.float().argmax(-1)), call


def test_draws_repeat_under_a_seed(nt):
    logits = torch.randn(256, 32000, device="cuda")
    torch.manual_seed(5)
    first = nt.sample(logits, 0.9, 50, 0.9)
    again = nt.sample(logits, 0.9, 50, 0.9)
    torch.manual_seed(5)
    assert torch.equal(nt.sample(logits, 0.9, 50, 0.9), first)
    assert not torch.equal(again, first)
    generator = torch.Generator(device="cuda").manual_seed(11)
    mine = nt.sample(logits, top_p=0.95, generator=generator)
    generator.manual_seed(11)
    assert torch.equal(nt.sample(logits, top_p=0.95, generator=generator), mine)
    seeds = torch.arange(256, device="cuda")
    assert torch.equal(
        nt.sampling(logits, seeds, top_p=0.95), nt.sampling(logits, seeds, top_p=0.95)
    )


def test_cuda_graph_replays_draw_afresh(nt):
    """Captured, each replay draws new tokens (torch's generator advances as for its
    own ops), and torch's random state works after it."""
    logits = torch.zeros(512, 1000, device="cuda")  # uniform: every draw differs
    nt.sample(logits, top_p=0.9)  # load the kernel before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens = nt.sample(logits, 1.0, 100, 0.9)
    graph.replay()
    first = tokens.clone()
    graph.replay()
    assert not torch.equal(tokens, first)
    assert int(tokens.max()) < 1000
    assert int(tokens.min()) >= 0
    torch.randn(3, device="cuda")


def test_compiled(nt):
    logits = torch.randn(8, 5000, device="cuda")
    compiled = torch.compile(lambda x: nt.sample(x, 0.8, 20, 0.9), fullgraph=True)
    tokens = compiled(logits)
    kept = logits.topk(20, dim=-1).indices
    assert (kept == tokens[:, None]).any(-1).all()
    greedy = torch.compile(lambda x: nt.sample(x, 0.0), fullgraph=True)
    assert torch.equal(greedy(logits), logits.argmax(-1))


# (what the error says, the call on logits x, seeds and a float32 tensor of a value a row)
REFUSALS = [
    ("logits must be float16", lambda nt, x, seeds, f32: nt.sample(x.to(torch.int32))),
    ("logits must be a \\(rows, vocabulary\\) tensor", lambda nt, x, seeds, f32: nt.sample(x[0])),
    ("top_p must be in", lambda nt, x, seeds, f32: nt.sample(x, top_p=0.0)),
    ("top_p must be in", lambda nt, x, seeds, f32: nt.sample(x, top_p=1.5)),
    ("temperature must be 0", lambda nt, x, seeds, f32: nt.sample(x, temperature=-1.0)),
    ("top_k must be 0", lambda nt, x, seeds, f32: nt.sample(x, top_k=-2)),
    ("top_k must be an int", lambda nt, x, seeds, f32: nt.sample(x, top_k=2.5)),
    ("min_p must be in", lambda nt, x, seeds, f32: nt.sample(x, min_p=1.5)),
    ("temperatures must have shape", lambda nt, x, seeds, f32: nt.sample(x, f32[:3])),
    ("temperatures must be float32", lambda nt, x, seeds, f32: nt.sample(x, f32.double())),
    ("top_ks must be int32 or int64", lambda nt, x, seeds, f32: nt.sample(x, top_k=f32)),
    ("top_ps is on cpu", lambda nt, x, seeds, f32: nt.sample(x, top_p=f32.cpu())),
    ("seeds must be int64", lambda nt, x, seeds, f32: nt.sampling(x, seeds.int())),
    ("seeds must have shape", lambda nt, x, seeds, f32: nt.sampling(x, seeds[:2])),
]


@pytest.mark.parametrize(("message", "call"), REFUSALS, ids=[m for m, _ in REFUSALS])
def test_bad_input_is_refused(nt, message, call):
    x = torch.randn(4, 100, device="cuda")
    seeds = torch.zeros(4, dtype=torch.int64, device="cuda")
    with pytest.raises((TypeError, ValueError), match=message):
        call(nt, x, seeds, torch.ones(4, device="cuda"))
