"""sort, argsort, msort and topk without a GPU: the runtime's limits agree with the
kernel file's, and what they refuse is refused before any launch, naming the limit
(the kernels' values are tests/ops/sort.py's interpreted check's)."""

import re

import pytest
import torch

from ntops_aot.kernels import sort as declared
from tests.ops import sort as maker


def test_the_runtime_and_the_kernel_file_agree(installed):
    runtime = installed._sort
    assert runtime.CANDIDATES == declared.CANDIDATES == maker.CANDIDATES
    whole = {int(tile): size for tile, (_, size) in declared.TILES.items() if tile.isdigit()}
    assert all(tile == size for tile, size in whole.items())
    assert runtime.LONGEST == max(whole) == maker.LONGEST
    assert declared.TILES["select"][1] >= declared.CANDIDATES  # a step holds the candidates
    assert set(declared.TILES) == set(declared.SPACE.switches["tile"]) == set(declared.CONFIGS)
    assert runtime.PART == declared.TILES["parts"][1] >= declared.CANDIDATES  # parts hold k
    assert runtime._PARTED_ROWS == maker.PARTED_ROWS


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda nt, x: nt.sort(x), "NotBuiltError", "rows of up to 1024"),
        (lambda nt, x: nt.argsort(x, descending=True), "NotBuiltError", "rows of up to 1024"),
        (lambda nt, x: nt.msort(x.t()), "NotBuiltError", "rows of up to 1024"),
        (lambda nt, x: nt.topk(x, 1025), "NotBuiltError", "k up to 1024"),
        (lambda nt, x: nt.topk(x, 2001), "RuntimeError", "selected index k out of range"),
        (lambda nt, x: nt.topk(x, -1), "RuntimeError", "selected index k out of range"),
        (lambda nt, x: nt.sort(x, 2), "IndexError", "out of range"),
    ],
)
def test_refusals_name_the_limit(installed, call, error, words):
    x = torch.zeros(3, 2000)  # refused before any launch: the CPU tensor is never read
    with pytest.raises((RuntimeError, IndexError), match=re.escape(words)) as raised:
        call(installed, x)
    assert type(raised.value).__name__ == error


def test_a_call_past_32_bit_offsets_runs_in_slices_of_rows(installed, monkeypatch):
    """Rows of 30 elements 30 apart under a limit of 200: slices of 6 rows, the last
    one short; each slice's tensors are views of the call's."""
    runtime = installed._sort
    launched = []
    monkeypatch.setattr(runtime, "_OFFSETS", 200)
    monkeypatch.setattr(runtime, "_launch", lambda group, *args: launched.append(args))
    x, values = torch.zeros(40, 30), torch.empty(40, 30)
    indices = torch.empty(40, 30, dtype=torch.int64)
    runtime._sliced("sort", "group", x, values, indices, 1)
    assert [args[0].shape[0] for args in launched] == [6] * 6 + [4]
    assert all(args[3] == 1 for args in launched)
    assert launched[1][1].data_ptr() == values[6].data_ptr()
