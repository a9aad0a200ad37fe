"""Sampling a token per row of logits, as a serving loop's sampling step does it:
`sample` (temperature, top-k, top-p, min-p, each a number for the batch or a tensor of
one value per row; greedy where the temperature is 0) draws each row's seed from
torch's CUDA generator and calls `sampling`, the op, whose tokens are a function of the
logits, the parameters and the seeds (a serving engine's per-request seeds).

Where a parameter's meaning reaches a bound (a temperature of 0 or less: greedy; top-k
of 0, or of the vocabulary or more: off; top-p of 1 or more: off, 0 or less: the most
probable token; min-p 0 or less: off, more than 1: as 1), the kernel applies it per row,
so per-row tensors need no check that would read GPU memory. The kernel:
kernels/sampling.py; what each filter keeps: _sampling_reference.py."""

import torch

from . import _C
from . import _checks as check
from ._C import SubclassError
from ._library import compiling, fake, routed
from ._reductions import built_value, chunk_size, chunks

_launch = _C.launch
_STEPS = check.groups("sampling", "step")
_CHUNKS, _DIGITS, _BOUNDED, _ROWS, _SURVIVING, _NUCLEUS = (
    _STEPS.get((step,)) for step in ("chunks", "digits", "bounded", "rows", "survivors", "nucleus")
)
# kernels/sampling.py's bits of the rows step: find the bounds and stop; read them;
# top-k's first two bytes counted by the chunk steps; top-p over the survivors of a
# bound (the bounded step leaves them).
_FIND_BOUNDS, _BOUNDS_FOUND, _HISTOGRAMS, _SURVIVORS = 16, 32, 64, 128
# Rows up to which top-k's first two bytes are counted a chunk a program (two launches
# beside one program a row's two passes); past it every program reads the row's
# histograms (C * 1 KB each), and the rows fill the GPU by themselves.
_SPLIT_ROWS = 64
# Rows up to which top-p after a bound always takes it over the bound's survivors
# (the steps "survivors" and "nucleus"; see `over_survivors`).
_SURVIVOR_ROWS = 128
EXPORTS = ("sample",)
_LOGITS = (torch.float16, torch.bfloat16, torch.float32)
# kernels/sampling.py's bits: the parameters given as tensors.
_TEMPERATURE, _TOP_K, _TOP_P, _MIN_P = 1, 2, 4, 8
_PER_ROW = (
    ("temperatures", _TEMPERATURE, (torch.float32,)),
    ("top_ks", _TOP_K, (torch.int32, torch.int64)),
    ("top_ps", _TOP_P, (torch.float32,)),
    ("min_ps", _MIN_P, (torch.float32,)),
)


def sample(logits, temperature=1.0, top_k=None, top_p=None, min_p=None, *, generator=None):
    """A token per row of `logits` (rows, vocabulary; float16, bfloat16 or float32), int64
    of shape (rows,): the logits divided by the temperature, filtered by top-k (the k
    most probable tokens, ties with the k-th kept), min-p (tokens at least min_p times as
    probable as the most probable) and top-p (the fewest most probable tokens holding
    top_p of what the others left), then drawn from what is left, renormalised. Each
    parameter is a number or a tensor of one value per row (float32; top_k int32 or
    int64); None leaves its filter off; temperature 0 takes the argmax (its first index).
    The draws come from torch's CUDA generator (`generator`, or the device's default),
    so they repeat under torch.manual_seed and are fresh on each replay of a CUDA
    graph, as torch's own random ops are."""
    op = "sample"
    tensors, numbers = {}, {}
    for (name, _, _), value, off in zip(
        _PER_ROW, (temperature, top_k, top_p, min_p), (1.0, 0, 1.0, 0.0), strict=True
    ):
        if isinstance(value, torch.Tensor):
            tensors[name] = value
        else:
            numbers[name] = off if value is None else value
    numbers = (
        numbers.get("temperatures", 1.0),
        numbers.get("top_ks", 0),
        numbers.get("top_ps", 1.0),
        numbers.get("min_ps", 0.0),
    )
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        shape = list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"{op}: logits must be a (rows, vocabulary) tensor, got {shape}")
    rows = logits.shape[0]
    # Refused before the seeds are drawn: nothing runs for a bad call. Eagerly, on
    # plain tensors, checked once, here, and drawn by `_drawn` (the op's checks cost
    # the call as much again); while Dynamo traces, or for a tensor subclass (a
    # FakeTensor), the op `sampling` checks and draws.
    per_row = _per_row(*(tensors.get(name) for name, _, _ in _PER_ROW))
    direct = not compiling()
    try:
        _checked(op, logits, DRAWN, per_row, numbers, real=direct)
    except SubclassError:
        direct = False
        _checked(op, logits, DRAWN, per_row, numbers, real=False)
    if _greedy(temperature, top_k):
        # Every row's first largest logit, which no filter removes: argmax's kernels
        # (H100, bf16 (256, 128256): 35 us, the sampling kernels' greedy 51, torch 47).
        # Imported here: this module's interpreted check loads it with the sampling
        # kernels alone.
        from ._max import argmax

        return argmax(logits, -1)
    # (out of place: torch.compile traces randint)
    seeds = torch.randint(1 << 62, (rows,), device=logits.device, generator=generator)
    if direct:
        try:
            return _drawn(logits, seeds, *(value for _, value, _ in per_row), *numbers)
        except SubclassError:  # the launcher's verdict, as the op's route takes it
            pass
    return sampling(logits, seeds, **tensors, temperature=numbers[0], top_k=numbers[1],
                    top_p=numbers[2], min_p=numbers[3])  # fmt: skip


def _greedy(temperature, top_k):
    """Whether every row takes the argmax, which draws nothing."""
    if isinstance(temperature, (int, float)) and temperature <= 0:
        return True
    return isinstance(top_k, int) and not isinstance(top_k, bool) and top_k == 1


# `_checked`'s seeds where the call draws them itself (`sample`).
DRAWN = object()


def _checked(op, logits, seeds, per_row, numbers, real=True):
    """Refuse what the kernel cannot take, before it runs: shapes, dtypes, devices, and
    numbers out of their domain; `real`: and tensors whose memory is not their data
    (check.tensor: a FakeTensor goes to the op, whose fake checks the rest). `seeds`
    DRAWN: the call draws its own, after."""
    tensor = check.tensor if real else lambda op, name, value: value
    tensor(op, "logits", logits)
    if seeds is not DRAWN:
        tensor(op, "seeds", seeds)
    if logits.ndim != 2 or logits.shape[1] == 0:
        raise ValueError(f"{op}: logits must be (rows, vocabulary), got {list(logits.shape)}")
    if logits.dtype not in _LOGITS:
        raise TypeError(f"{op}: logits must be float16, bfloat16 or float32, not {logits.dtype}")
    if logits.shape[1] >= 1 << 31:
        raise ValueError(f"{op}: a vocabulary of {logits.shape[1]} passes int32 indices")
    rows = logits.shape[0]
    given = [] if seeds is DRAWN else [("seeds", seeds, (torch.int64,))]
    for name, value, dtypes in [*given, *per_row]:
        if value is None:
            continue
        tensor(op, name, value)
        if value.shape != (rows,):
            raise ValueError(f"{op}: {name} must have shape ({rows},), got {list(value.shape)}")
        if value.dtype not in dtypes:
            names = " or ".join(str(dtype).removeprefix("torch.") for dtype in dtypes)
            raise TypeError(f"{op}: {name} must be {names}, not {value.dtype}")
        if value.device != logits.device:
            raise ValueError(f"{op}: {name} is on {value.device}, logits on {logits.device}")
    temperature, top_k, top_p, min_p = numbers
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise TypeError(f"{op}: {name} must be a number (not NaN), not {value!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise TypeError(f"{op}: top_k must be an int, not {top_k!r}")
    if top_k < 0:
        raise ValueError(f"{op}: top_k must be 0 (off) or more, not {top_k}")
    if temperature < 0:
        raise ValueError(f"{op}: temperature must be 0 (greedy) or more, not {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"{op}: top_p must be in (0, 1], not {top_p}")
    if not 0 <= min_p <= 1:
        raise ValueError(f"{op}: min_p must be in [0, 1], not {min_p}")


@fake("sampling")
def _fake(logits, seeds, temperatures=None, top_ks=None, top_ps=None, min_ps=None,
          temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):  # fmt: skip
    per_row = _per_row(temperatures, top_ks, top_ps, min_ps)
    _checked("sampling", logits, seeds, per_row, (temperature, top_k, top_p, min_p), real=False)
    return torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)


def _per_row(*tensors):
    return [
        (name, value, dtypes) for (name, _, dtypes), value in zip(_PER_ROW, tensors, strict=True)
    ]


@routed("sampling")
def sampling(logits, seeds, temperatures=None, top_ks=None, top_ps=None, min_ps=None,
             temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):  # fmt: skip
    """A token per row of `logits`, drawn as `sample` draws it, from the given `seeds`
    (int64, one per row: the same seeds, logits and parameters give the same tokens).
    A parameter's tensor (one value per row) takes the place of its number."""
    op = "sampling"
    per_row = _per_row(temperatures, top_ks, top_ps, min_ps)
    _checked(op, logits, seeds, per_row, (temperature, top_k, top_p, min_p))
    return _drawn(logits, seeds, temperatures, top_ks, top_ps, min_ps,
                  temperature, top_k, top_p, min_p)  # fmt: skip


def _drawn(logits, seeds, temperatures, top_ks, top_ps, min_ps, temperature, top_k, top_p,
           min_p):  # fmt: skip
    """`sampling`'s launches, its arguments checked (`_checked`)."""
    flags, tensors = 0, []
    # A parameter given as a number still takes a tensor argument, never read: a view
    # of the seeds in its dtype (no allocation, nothing a CUDA graph must keep).
    unused = seeds if seeds.is_contiguous() else seeds.contiguous()
    for (_, bit, dtypes), value in zip(
        _PER_ROW, (temperatures, top_ks, top_ps, min_ps), strict=True
    ):
        if value is None:
            tensors.append(unused.view(dtypes[0])[: logits.shape[0]])
            continue
        flags |= bit
        tensors.append(value.to(torch.int32) if value.dtype == torch.int64 else value)
    top_k = min(top_k, logits.shape[1])
    numbers = (float(temperature), top_k, float(top_p), float(min_p))
    rows, vocabulary = logits.shape
    device = logits.device
    selecting = flags & _TOP_K or 0 < top_k < vocabulary
    size = chunks(vocabulary, chunk_size("sampling")) * 256
    bounded = selecting or flags & _MIN_P or numbers[3] > 0
    histograms = selecting and rows < _SPLIT_ROWS
    survive = bounded and (flags & _TOP_P or numbers[2] < 1) and over_survivors(logits, selecting)
    # The buffers a flag leaves unused: stand-ins of their shapes, never read.
    if not (histograms and survive):
        spare = torch.empty(1, dtype=torch.int64, device=device)
    if histograms:
        flags |= _HISTOGRAMS
        leading, second = (torch.empty(rows, size, dtype=torch.int32, device=device) for _ in "ab")
    else:
        leading = second = spare.view(torch.int32)[:1].expand(rows, size)
    capacity = built_value("sampling", "capacity") or 1
    if survive:
        flags |= _SURVIVORS
        survivors = torch.empty(rows, capacity, dtype=torch.int64, device=device)
        taken = torch.empty(rows, dtype=torch.int64, device=device)
    else:
        survivors, taken = spare.expand(rows, capacity), spare.expand(rows)
    peaks, firsts, masses = chunk_results(logits, tensors[0], numbers[0], flags, leading)
    if flags & _HISTOGRAMS:
        _launch(_DIGITS, logits, tensors[1], peaks, leading, second, numbers[1], flags)
    output = torch.empty(rows, dtype=torch.int64, device=device)
    bounds = torch.empty(rows, dtype=torch.int64, device=device)
    counts = (leading, second, bounds, output, survivors, taken)
    # A bound may cut (top-k or min-p on, as numbers or per row): its rows step finds
    # it, a chunk step sums each chunk's mass above it (and leaves its survivors for
    # top-p), and the draw reads one tile (else two passes over the row, in one
    # program).
    step = _NUCLEUS if flags & _SURVIVORS else _ROWS
    if bounded:
        arguments = (logits, *tensors, seeds, peaks, firsts, masses, *counts, *numbers)
        _launch(step, *arguments, flags | _FIND_BOUNDS)
        masses = chunk_kept(logits, tensors[0], bounds, peaks, numbers[0], flags, survivors, taken)
        flags |= _BOUNDS_FOUND
    arguments = (logits, *tensors, seeds, peaks, firsts, masses, *counts, *numbers)
    _launch(step, *arguments, flags)
    return output


def over_survivors(logits, selecting):
    """Whether top-p after a bound (top-k where `selecting`, else min-p) takes it over
    the bound's survivors rather than by rejection rounds. H200, 128256 logits,
    2026-11-28, the survivors' time / the rounds': top-k 50 with top-p 0.9 0.55-0.76 up
    to 128 rows, bf16 1.01-1.04 at 192-256, float32 0.77-0.80; top-k 1000 with top-p
    0.95, bf16 0.77-0.97 up to 64 rows, 1.03-1.06 at 96-128, 1.29-1.30 at 192-256
    (1024 survivors a row to sort), float32 0.64-0.85; min-p 0.1 with top-p 0.9
    0.39-0.70 everywhere."""
    return logits.shape[0] <= _SURVIVOR_ROWS or logits.dtype == torch.float32 or not selecting


def chunk_results(logits, temperatures, temperature, flags, leading):
    """The chunks step (kernels/sampling.py): for each chunk of each row, its maximum
    (NaN where it holds one), the index of its first maximum (or NaN) and its mass,
    sum(exp((x - maximum) / temperature)); (rows, chunks) each. With flag 64, the
    histogram of its keys' first byte into `leading` (rows, chunks * 256)."""
    rows, count = logits.shape[0], chunks(logits.shape[1], chunk_size("sampling"))
    peaks, masses = (torch.empty(rows, count, device=logits.device) for _ in range(2))
    firsts = torch.empty(rows, count, dtype=torch.int32, device=logits.device)
    arguments = (logits, temperatures, peaks, firsts, masses, leading, temperature, flags)
    _launch(_CHUNKS, *arguments)
    return peaks, firsts, masses


def chunk_kept(logits, temperatures, bounds, peaks, temperature, flags, survivors, taken):
    """The bounded step (kernels/sampling.py): for each chunk of each row, the sum of
    exp((x - its maximum) / temperature) over its logits whose keys are at least the
    row's bound (`bounds`, int64 keys; `peaks` the chunks' maxima); (rows, chunks).
    With flag 128 (the build "survivors"), those logits into `survivors` (rows,
    capacity), counted in `taken` (rows,), which must hold 0."""
    kept = torch.empty_like(peaks)
    arguments = (logits, temperatures, bounds, peaks, kept, survivors, taken, temperature)
    _launch(_SURVIVING if flags & _SURVIVORS else _BOUNDED, *arguments, flags)
    return kept
