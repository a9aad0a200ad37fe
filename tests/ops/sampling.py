"""sampling: what can be compared token for token is what has one answer. Greedy rows
(temperature 0), a top-p so small that only the most probable token passes (the draw
and the rejection run) and a min-p of 1 (the bound and the mass run) all give the
argmax of logits without ties. The draws themselves are tested by their distribution:
tests/gpu/test_sampling.py on the GPU, `interpreted` here under Triton's interpreter."""

import importlib.util
import pathlib

import torch

from tests.calls import Call
from tests.gpu.layouts import strided


def references():
    """aot/runtime/_sampling_reference.py, loaded from the tree: it imports only torch."""
    path = pathlib.Path(__file__).parents[2] / "aot" / "runtime" / "_sampling_reference.py"
    spec = importlib.util.spec_from_file_location("_sampling_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def num_tensors(variant):
    # chunks: logits, temperatures, peaks, firsts, masses; rows: logits, temperatures,
    # top_ks, top_ps, min_ps, seeds, peaks, firsts, masses, bounds, output
    # bounded: logits, temperatures, bounds, peaks, kept; rows: also bounds, before output
    # digits: logits, top_ks, peaks, leading, second; chunks and rows: also leading
    # (and second) before bounds; bounded and rows: survivors and taken last
    sizes = {"chunks": 6, "digits": 5, "bounded": 7, "rows": 15, "survivors": 7, "nucleus": 15}
    return sizes[variant["switches"]["step"]]


def distinct(rows, vocabulary, dtype, device="cuda"):
    """Logits without ties in any dtype: a permutation of 0 .. vocabulary - 1 a row
    (integers up to 256 are exact in bfloat16), scaled into a softmax's working range;
    past 256 in bfloat16 ties come back, which the argmax takes as torch does (the first)."""
    order = torch.stack([torch.randperm(vocabulary) for _ in range(rows)])
    return (order.to(torch.float32) / 16).to(dtype).to(device)


def chunk_reference(logits, temperature, size):
    """The chunks step's results in torch: per chunk of `size` logits, its maximum (NaN
    where it holds one), the index of its first maximum (or NaN), and the sum of
    exp((x - maximum) / temperature) over the others."""
    x = logits.float()
    padded = torch.nn.functional.pad(x, (0, -x.shape[1] % size), value=float("-inf"))
    parts = padded.view(x.shape[0], -1, size)
    nan = parts.isnan()
    finite = parts.masked_fill(nan, float("-inf"))
    peak = finite.amax(-1)
    index = torch.arange(padded.shape[1], device=x.device).view(1, -1, size)
    first = torch.where(finite == peak.unsqueeze(-1), index, 1 << 40).amin(-1)
    first_nan = torch.where(nan, index, 1 << 40).amin(-1)
    shift = torch.where(peak == float("-inf"), 0.0, peak).unsqueeze(-1)
    mass = torch.exp((finite - shift) / temperature).sum(-1)
    has = nan.any(-1)
    peaks = torch.where(has, float("nan"), peak)
    return peaks, torch.where(has, first_nan, first).int(), mass


def keys(x):
    """kernels/sampling.py's order-preserving int64 keys of float32 values."""
    bits = (x.float() + 0.0).view(torch.int32)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64) + (1 << 31)


def kept_reference(logits, temperature, bounds, peaks, size):
    """The bounded step's results in torch: per chunk, the sum of exp((x - its maximum)
    / temperature) over its logits whose keys are at least the row's bound."""
    x = logits.float()
    padded = torch.nn.functional.pad(x, (0, -x.shape[1] % size), value=float("-inf"))
    parts = padded.view(x.shape[0], -1, size)
    inside = keys(parts) >= bounds.view(-1, 1, 1)
    shift = torch.where(peaks == float("-inf"), 0.0, peaks).unsqueeze(-1)
    return torch.where(inside, torch.exp((parts - shift) / temperature), 0.0).sum(-1)


def packed(logits):
    """kernels/sampling.py's survivors (`pack`): each logit's key less 2^31 above
    2^31 - 1 - its index, (rows, vocabulary) int64."""
    index = torch.arange(logits.shape[1], device=logits.device)
    return ((keys(logits) - (1 << 31)) << 32) | ((1 << 31) - 1 - index)


def survivors_reference(logits, bounds):
    """Each row's survivors of its bound, packed, in descending order, and how many:
    the bounded step leaves them in any order (one atomic a chunk)."""
    ordered = packed(logits)
    inside = keys(logits) >= bounds.view(-1, 1)
    lowest = torch.iinfo(torch.int64).min
    ordered = torch.where(inside, ordered, lowest).sort(-1, descending=True).values
    return ordered, inside.sum(-1)


def chunked_keys(logits, size):
    """The keys of `logits` as (rows, chunks, size), padded with -1 past the row."""
    found = keys(logits)
    padded = torch.nn.functional.pad(found, (0, -found.shape[1] % size), value=-1)
    return padded.view(found.shape[0], -1, size)


def histogram(values, inside):
    """Counts of `values` (0-255) where `inside`, along the last dim: (..., 256)."""
    one_hot = torch.nn.functional.one_hot(values.clamp(0, 255), 256) * inside.unsqueeze(-1)
    return one_hot.sum(-2).int()


def digits_reference(logits, ks, size):
    """The chunk steps' histograms of top-k's radix select: each chunk's first bytes
    of its keys, and its second bytes inside the first byte's bucket that holds each
    row's k-th largest key."""
    parts = chunked_keys(logits, size)
    valid = parts >= 0
    leading = histogram((parts >> 24) & 255, valid)
    total = leading.sum(1)
    above = total.flip(-1).cumsum(-1).flip(-1) - total
    wanted = ks.view(-1, 1).to(device=above.device, dtype=above.dtype)
    bins = torch.arange(256, device=logits.device)
    chosen = torch.where((above < wanted) & (above + total >= wanted), bins, -1).amax(-1)
    inside = valid & ((parts >> 24) == chosen.view(-1, 1, 1))
    second = histogram((parts >> 16) & 255, inside)
    return leading.flatten(1), second.flatten(1)


def run(nt, variant, spec, dtype, bucket):
    """The chunks step: its results for 3 rows of 10000 logits (3 chunks; a NaN in one),
    against `chunk_reference`; the bounded steps' against `kept_reference` (and
    `survivors_reference`). The rows steps: four calls with one answer each, every
    tensor laid out as the kernel `spec` takes it: greedy rows, top-p 1e-9 (a draw, then
    rejections down to the argmax), min-p 1, and top-k 2 with top-p 1e-9 (the
    "nucleus" step's draw over the survivors). 3 rows, 16 for aligned specs (sizes
    divisible by 16), 2 for 64-bit ones (strided() sets the outermost dim 2^31 apart)."""
    import importlib

    wide = spec.width == 64
    rows, vocabulary = 2 if wide else 16 if spec.aligned else 3, 10000

    def laid_out(index, shape, dtype, values):
        tensor = strided(shape, dtype, unit=spec.unit[index], aligned=spec.aligned,
                         wide=wide and index == 0)  # fmt: skip
        return tensor.copy_(values)

    values = distinct(rows, vocabulary, dtype)
    # A maximum of its own a row, each in another chunk: past 256 the permutation ties
    # in half types, and a top-p or min-p draw may take any of tied maxima.
    values[torch.arange(rows), (torch.arange(rows) * 3331 + 1234) % vocabulary] = 1000.0
    logits = laid_out(0, (rows, vocabulary), dtype, values)
    step = variant["switches"]["step"]
    module = importlib.import_module(f"{nt.__name__}._sampling")
    size = importlib.import_module(f"{nt.__name__}._reductions").chunk_size("sampling")
    counts = (rows, -(-vocabulary // size) * 256)
    if step == "chunks":  # with the first bytes' histograms (64)
        logits[0, 5000] = float("nan")
        temperatures = laid_out(1, (rows,), torch.float32, torch.full((rows,), 0.7))
        leading = torch.empty(counts, dtype=torch.int32, device=logits.device)
        found = module.chunk_results(logits, temperatures, 1.0, 1 | 64, leading)
        expected = chunk_reference(logits, 0.7, size)
        return (*found, leading), (*expected, digits_reference(logits, torch.ones(rows), size)[0])
    if step == "digits":  # each row's k: 1 to 3000
        ks = torch.arange(rows, dtype=torch.int32) * 997 % 3000 + 1
        top_ks = laid_out(1, (rows,), torch.int32, ks)
        peaks = chunk_reference(logits, 1.0, size)[0]
        leading, second = digits_reference(logits, ks.to(logits.device), size)
        leading = leading.clone()
        found = torch.empty(counts, dtype=torch.int32, device=logits.device)
        module._launch(module._DIGITS, logits, top_ks, peaks, leading, found, 0, 2 | 64)
        return found, second
    if step in ("bounded", "survivors"):  # bounds: each row's 100th largest key, 0 for the last
        temperatures = laid_out(1, (rows,), torch.float32, torch.full((rows,), 0.7))
        wanted = keys(logits).sort(-1, descending=True).values[:, 99]
        wanted[-1] = 0
        bounds = laid_out(2, (rows,), torch.int64, wanted)
        peaks = chunk_reference(logits, 0.7, size)[0]
        capacity = importlib.import_module(f"{nt.__name__}._reductions").built_value(
            "sampling", "capacity"
        )
        survivors = torch.empty(rows, capacity, dtype=torch.int64, device=logits.device)
        taken = torch.zeros(rows, dtype=torch.int64, device=logits.device)
        kept = kept_reference(logits, 0.7, bounds, peaks, size)
        if step == "bounded":  # the mass alone: nothing taken
            found = module.chunk_kept(logits, temperatures, bounds, peaks, 1.0, 1, survivors, taken)
            return (found, taken), (kept, torch.zeros_like(taken))
        # the survivors too (128): the rows with a bound leave their 100 (and ties)
        arguments = (logits, temperatures, bounds, peaks, 1.0, 1 | 128, survivors, taken)
        found = module.chunk_kept(*arguments)
        ordered, counts = survivors_reference(logits, bounds)
        left = (torch.arange(capacity, device=logits.device) < taken.view(-1, 1))[:-1]
        lowest = torch.iinfo(torch.int64).min
        got = torch.where(left, survivors[:-1], lowest).sort(-1, descending=True).values
        counts[-1] = 0  # a row without a bound leaves nothing
        return (found, got, taken), (kept, ordered[:-1, :capacity], counts)
    calls = ((0.0, 0, 1.0, 0.0), (1.0, 0, 1e-9, 0.0), (0.7, 0, 1.0, 1.0), (1.0, 2, 1e-9, 0.0))
    answers = []
    # Every parameter a tensor: each call has a bound and top-p, which take the
    # "nucleus" step where the runtime finds it pays (`over_survivors`): the "rows"
    # step's calls are told it does not.
    chooses = module.over_survivors
    if step == "rows":
        module.over_survivors = lambda logits, selecting: False
    try:
        for temperature, top_k, top_p, min_p in calls:
            per_row = [
                laid_out(1, (rows,), torch.float32, torch.full((rows,), temperature)),
                laid_out(2, (rows,), torch.int32, torch.full((rows,), top_k, dtype=torch.int32)),
                laid_out(3, (rows,), torch.float32, torch.full((rows,), top_p)),
                laid_out(4, (rows,), torch.float32, torch.full((rows,), min_p)),
            ]
            seeds = laid_out(5, (rows,), torch.int64, torch.arange(rows) * 7919 + 1)
            answers.append(nt.sampling(logits, seeds, *per_row))
    finally:
        module.over_survivors = chooses
    expected = logits.float().argmax(-1)
    return torch.stack(answers), torch.stack([expected] * len(calls))


def check(result, expected, variant, dtype):
    if variant["switches"]["step"] in ("bounded", "survivors"):  # kept, [survivors,] taken
        torch.testing.assert_close(result[0], expected[0], rtol=1e-5, atol=0)
        for found, wanted in zip(result[1:], expected[1:], strict=True):
            torch.testing.assert_close(found, wanted, rtol=0, atol=0)
        return
    if isinstance(result, tuple):  # the chunks step's peaks, firsts, masses, histograms
        torch.testing.assert_close(result[0], expected[0], rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(result[1], expected[1], rtol=0, atol=0)
        torch.testing.assert_close(result[2], expected[2], rtol=1e-5, atol=0)
        torch.testing.assert_close(result[3], expected[3], rtol=0, atol=0)
        return
    torch.testing.assert_close(result, expected, rtol=0, atol=0)


def calls(name, dtype):
    """The public function's calls beside the declared samples: per-row tensors for
    every parameter, and numbers for every filter at once."""

    def per_row(make):
        logits = make((4, 1000), dtype)
        seeds = make((4,), torch.int64, bound=1 << 40)
        parameters = (make((4,), torch.float32), make((4,), torch.int32))
        parameters += (make((4,), torch.float32), make((4,), torch.float32))
        return (logits, seeds, *parameters), {}

    def filtered(make):
        logits, seeds = make((2, 3000), dtype), make((2,), torch.int64, bound=1 << 40)
        return (logits, seeds), {"temperature": 0.8, "top_k": 50, "top_p": 0.9, "min_p": 0.05}

    return [
        Call(f"{name} with per-row tensors", name, per_row),
        Call(f"{name} with every filter", name, filtered),
    ]


def fuzz_spec():
    from tests.gpu.fuzz_ops import Spec

    return Spec(_draw, _greedy_reference, (torch.float16, torch.bfloat16, torch.float32))


def _greedy_reference(logits, seeds, temperatures=None, top_ks=None, top_ps=None,
                      min_ps=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):  # fmt: skip
    """torch.argmax (NaN the maximum, the first of ties): the fuzz's calls are greedy."""
    return logits.argmax(-1)


def _draw(d, op):
    """Greedy calls (the only ones with one answer over random logits, ties and NaN
    included): temperature 0 or top-k 1, as numbers or per-row tensors, with the other
    filters set or not."""
    dtype = d.principal((torch.float16, torch.bfloat16, torch.float32))
    rows, vocabulary = d.pick((1, 3, 8)), d.pick((1, 7, 1000, 4097, 32000))
    logits = d.tensor((rows, vocabulary), dtype)
    seeds = d.tensor((rows,), torch.int64, values=torch.arange(rows) * 31 + 5, exotic=False)
    kwargs = {}
    if d.chance(0.5):
        kwargs["temperature"] = 0.0
    else:
        kwargs["top_k"] = 1
    if d.chance(0.5):
        kwargs["top_p"] = d.pick((0.5, 0.95))
    if d.chance(0.3):
        zeros = torch.zeros(rows)
        kwargs["temperatures"] = d.tensor((rows,), torch.float32, values=zeros, exotic=False)
    return (logits, seeds), kwargs


def interpreted(make):
    """aot/runtime/_sampling.py under Triton's interpreter (CPU; tests/ops/_runtime.py),
    both steps, float32 and bfloat16: the single-answer calls of `run` over chunks of
    64 (4 a row) and of 2 (100 a row: two tiles of the chunks' results); then 200 draws
    (rows of the same logits over 24 tokens, chunks of 16) with every filter on, against
    `probabilities`: no token outside the filtered support, and a chi-square p-value
    above 1e-4 (the seeds are fixed, so it fails never or always; the GPU suite draws
    10^5 and more); top-p over a bound's survivors (capacity 16: top-k with top-p, and
    the rejection rounds where min-p's survivors pass it), top-k of bf16 logits tied at
    the k-th value, top-k by passes over an odd number of tiles, and top-k with top-p
    by the rounds. The interpreter takes about 0.2 s a row here."""
    module = references()
    for dtype, size in ((torch.float32, 64), (torch.bfloat16, 64), (torch.float32, 2)):
        nt = _runtime(make, size)
        logits = distinct(3, 200, dtype, device="cpu")
        calls = ((0.0, 0, 1.0, 0.0), (1.0, 0, 1e-9, 0.0), (0.7, 0, 1.0, 1.0), (1.0, 2, 1e-9, 0))
        for t, k, p, q in calls:
            tokens = nt.sampling(logits, torch.arange(3), temperature=t, top_k=k, top_p=p, min_p=q)
            assert torch.equal(tokens, logits.float().argmax(-1)), (dtype, size, t, k, p, q)
    nt = _runtime(make, 16)
    generator = torch.Generator().manual_seed(0)
    rows, vocabulary = 200, 24
    row = torch.randn(vocabulary, generator=generator) * 1.5
    logits = row.expand(rows, vocabulary).contiguous()
    seeds = torch.randint(0, 1 << 62, (rows,), generator=generator)
    t, k, p, q = 1.3, 12, 0.8, 0.02
    tokens = nt.sampling(logits, seeds, temperature=t, top_k=k, top_p=p, min_p=q)
    chances = module.probabilities(logits[:1], temperature=t, top_k=k, top_p=p, min_p=q)[0]
    assert 1 < int((chances > 0).sum()) < k, chances  # every filter cuts
    assert chi_square_p(tokens, chances) > 1e-4, (tokens, chances)
    # The draws found by the chunks' masses: of all of them, above top-k's and min-p's
    # bounds (the bounded step's).
    # (60 rows: top-k's first two bytes counted a chunk a program, below 64 rows)
    # Top-p over the survivors (top-k's 5), and over more survivors than the buffer
    # holds (min-p's 24: the rounds).
    for options in (
        {},
        {"top_k": 5},
        {"min_p": 0.1},
        {"top_k": 5, "top_p": 0.7},
        {"min_p": 0.001, "top_p": 0.8},
    ):
        drawn = nt.sampling(logits[:60], seeds[:60], temperature=t, **options)
        chances = module.probabilities(logits[:1], temperature=t, **options)[0]
        if "min_p" in options and "top_p" in options:
            bounded = module.probabilities(logits[:1], temperature=t, min_p=options["min_p"])
            assert int((bounded > 0).sum()) > 16, bounded
        assert chi_square_p(drawn, chances) > 1e-4, (options, drawn, chances)
    # Half-type logits tied at top-k's k-th value (bf16: 4 ties of the 5th largest; the
    # select stops after the bytes that hold bf16's bits): every tie kept, nothing below,
    # with and without the chunks' histograms (fewer than 64 rows, and 64).
    values = torch.tensor([4.0, 3.5, 3.0, 2.5, 2.5, 2.5, 2.5, 2.0, 1.5, 1.0] + [0.0] * 14)
    tied = values.to(torch.bfloat16).expand(64, vocabulary).contiguous()
    chances = module.probabilities(tied[:1], temperature=1.0, top_k=5)[0]
    assert int((chances > 0).sum()) == 7, chances
    for rows in (40, 64):
        drawn = nt.sampling(tied[:rows], seeds[:rows], top_k=5)
        assert chi_square_p(drawn, chances) > 1e-4, (rows, drawn, chances)
    # Top-k by passes over the row (64 rows: no chunk histograms) over an odd number of
    # tiles (40 logits in chunks of 16: the radix select reads two a step, the third
    # alone), the largest four in the last tile: counted twice, the bound would keep two.
    odd = torch.full((40,), -2.0)
    odd[33::2] = torch.tensor([5.0, 5.1, 5.2, 5.3])
    odd = odd.expand(64, 40).contiguous()
    drawn = nt.sampling(odd, seeds[:64], top_k=4)
    chances = module.probabilities(odd[:1], temperature=1.0, top_k=4)[0]
    assert int((chances > 0).sum()) == 4, chances
    assert chi_square_p(drawn, chances) > 1e-4, (drawn, chances)
    # Top-p after top-k by the rounds, where the runtime finds the survivors do not pay.
    nt.over_survivors = lambda logits, selecting: False
    drawn = nt.sampling(logits[:60], seeds[:60], temperature=t, top_k=5, top_p=0.7)
    chances = module.probabilities(logits[:1], temperature=t, top_k=5, top_p=0.7)[0]
    assert chi_square_p(drawn, chances) > 1e-4, (drawn, chances)


def _runtime(make, size):
    """The runtime module with `make`'s kernels behind its launches, built with chunks
    (and tiles) of `size` logits."""
    import types

    from ntops_aot.aot.declare.space import Config
    from ntops_aot.kernels import sampling
    from tests.ops._runtime import load

    def configured(op, ndim, dtype="fp32", **options):
        return make(op, ndim, dtype, **{**options, "block_size": size, "capacity": 16})

    configured.made = make.made
    module = types.SimpleNamespace(
        CONFIG=Config({"block_size": size, "capacity": 16}),
        SPACE=sampling.SPACE,
        premake=sampling.premake,
    )
    configured.registry = {"sampling": types.SimpleNamespace(module=module)}
    steps = ("chunks", "digits", "bounded", "rows", "survivors", "nucleus")
    groups = {"sampling": {step: {"step": step} for step in steps}}
    return load(configured, "_sampling", groups)


def chi_square_p(tokens, chances):
    """The p-value of Pearson's chi-square test of `tokens` (draws) against `chances`
    (a distribution over the vocabulary, float64), over the tokens it gives any chance,
    tokens of expected count under 5 pooled into one cell; draws outside its support
    fail outright (p = 0)."""
    counts = torch.bincount(tokens.cpu(), minlength=chances.numel()).double()
    chances = chances.cpu()
    if counts[chances == 0].sum() > 0:
        return 0.0
    expected = chances * tokens.numel()
    small = (expected < 5) & (chances > 0)
    large = expected >= 5
    observed = torch.cat([counts[large], counts[small].sum().reshape(1)])
    wanted = torch.cat([expected[large], expected[small].sum().reshape(1)])
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    if wanted.numel() < 2:
        return 1.0
    statistic = ((observed - wanted) ** 2 / wanted).sum()
    freedom = torch.tensor(float(wanted.numel() - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(freedom / 2, statistic / 2))
