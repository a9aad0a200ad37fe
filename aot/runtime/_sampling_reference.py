"""What `sampling` keeps and draws from, in torch (the tests' reference and the op's
semantics written out): `probabilities` is the exact distribution of a row's token, in
float64; `sampling_reference` draws from it as torch users do, by sorting (the
reference the benchmark compares with), and takes the argmax where the row is
greedy. Imports torch only."""

import torch


def _row_parameters(rows, temperatures, top_ks, top_ps, min_ps, numbers, device):
    """The four parameters as float64 / int64 tensors of one value per row."""
    given = (temperatures, top_ks, top_ps, min_ps)
    columns = []
    for value, number in zip(given, numbers, strict=True):
        if value is None:
            value = torch.full((rows,), number, dtype=torch.float64, device=device)
        columns.append(value.to(torch.float64))
    return columns


def probabilities(logits, temperatures=None, top_ks=None, top_ps=None, min_ps=None,
                  temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):  # fmt: skip
    """Each row's distribution after the filters, float64 (rows, vocabulary): softmax of
    logits / temperature; top-k keeps the logits at least the k-th largest (ties with it
    kept; k of 0 or at least the vocabulary: off); min-p those at least max +
    temperature * log(min_p) (float32, as the kernel computes the bound; 0 or less: off,
    more than 1: as 1); top-p, over what those leave, each token whose more probable
    tokens hold less than top_p of that mass (1 or more: off; 0 or less: the most
    probable ones). A greedy row (temperature 0 or less, or top-k 1) is one-hot at its
    first maximum."""
    rows, vocabulary = logits.shape
    t, k, p, q = _row_parameters(
        rows, temperatures, top_ks, top_ps, min_ps, (temperature, top_k, top_p, min_p),
        logits.device,
    )  # fmt: skip
    x = logits.to(torch.float32)
    top = x.max(-1, keepdim=True).values
    greedy = (t <= 0) | (k == 1)
    scaled = x.to(torch.float64) / torch.where(greedy, 1.0, t)[:, None]
    kept = torch.ones_like(x, dtype=torch.bool)
    on = (k > 0) & (k < vocabulary)
    kth = x.sort(-1, descending=True).values.gather(
        -1, (k.clamp(1, vocabulary) - 1).long()[:, None]
    )
    kept &= ~on[:, None] | (x >= kth)
    floor = (
        top + torch.log(q.clamp(max=1.0).to(torch.float32))[:, None] * t.to(torch.float32)[:, None]
    )
    kept &= ~(q > 0)[:, None] | (x >= floor)
    weights = torch.where(kept, torch.exp(scaled - scaled.max(-1, keepdim=True).values), 0.0)
    mass = weights.sum(-1, keepdim=True)
    # the mass of the kept tokens strictly more probable than each token
    ordered, order = weights.sort(-1, descending=True)
    before = ordered.cumsum(-1) - ordered
    # ties: a token's more probable tokens exclude its equals
    first_of_tie = torch.searchsorted(-ordered.contiguous(), -ordered.contiguous(), side="left")
    before = before.gather(-1, first_of_tie)
    inside = torch.empty_like(kept).scatter_(-1, order, before < p.clamp(min=1e-30)[:, None] * mass)
    kept &= (p >= 1)[:, None] | inside
    weights = torch.where(kept, weights, 0.0)
    result = weights / weights.sum(-1, keepdim=True)
    first = torch.nn.functional.one_hot(x.argmax(-1), vocabulary).to(torch.float64)
    return torch.where(greedy[:, None], first, result)


def sampling_reference(logits, seeds, temperatures=None, top_ks=None, top_ps=None,
                       min_ps=None, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):  # fmt: skip
    """A token per row drawn from `probabilities` by torch.multinomial (its sort and
    cumulative sum: what a torch user runs), seeded by the row's seed; the argmax of
    greedy rows. The draws differ from the kernel's; their distribution is the same."""
    if logits.device.type == "meta" or _faked(logits):
        return torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    chances = probabilities(
        logits, temperatures, top_ks, top_ps, min_ps, temperature, top_k, top_p, min_p
    )
    tokens = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    for row in range(logits.shape[0]):
        generator = torch.Generator(device=logits.device)
        generator.manual_seed(int(seeds[row]))
        tokens[row] = torch.multinomial(chances[row], 1, generator=generator)[0]
    return tokens


def _faked(tensor):
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)
