"""Shapes are checked once, in the launcher, for every op: a product's operands name
their dims (SPACE.dims: rows, inner, columns, batch), so `_C.plan` refuses what does
not multiply as a launch would, and sizes the product it allocates, without a GPU."""

import json
import os
import subprocess
import sys

import pytest
import torch

from ntops_aot.aot import build as pipeline
from tests.wheels import install

H = torch.float16
SDPA = "scaled_dot_product_attention-head_dim=64-mask=bool"
SDPA_VARIANT = "scaled_dot_product_attention-sm_80-fp16-nd4-head_dim=64-mask=bool"
MM, BMM, ADDMM = (f"{op}-fp32_precision=tf32" for op in ("mm", "bmm", "addmm"))


@pytest.fixture
def plan(installed):
    def plan(key, *args):
        return installed._C.plan(installed._C.group(key), 90, *args)

    return plan


def empty(*shape):
    return torch.empty(*shape, dtype=H)


def test_mm_of_operands_that_do_not_multiply_is_refused(plan):
    with pytest.raises(ValueError, match=r"input has shape \(64, 32\) and other has shape "):
        plan(MM, empty(64, 32), empty(48, 16), empty(3, 5))
    with pytest.raises(ValueError, match="their inner dims must be equal"):
        plan(MM, empty(64, 32), empty(48, 16), None)
    with pytest.raises(ValueError, match=r"output has shape \(3, 5\), but the result has shape"):
        plan(MM, empty(64, 32), empty(32, 16), empty(3, 5))
    with pytest.raises(ValueError, match="mm: input must be 2-D, not 3-D"):
        plan(MM, empty(2, 64, 32), empty(32, 16), None)
    plan(MM, empty(64, 32), empty(32, 16), empty(64, 16))


def test_mm_allocates_the_product_row_major(plan):
    """Of the rows and columns its operands name, row-major as torch's mm returns it,
    whatever the layout of the input it is allocated like."""
    square, out = empty(64, 64), empty(64, 64)
    allocated = plan(MM, square.t(), square, None)["params"]
    given = plan(MM, square.t(), square, out)["params"]
    at = given.index(out.data_ptr())  # the output's parameters follow: sizes, strides
    assert allocated[:at] == given[:at]
    assert allocated[at + 1 :] == given[at + 1 :]
    assert plan(MM, square.t(), square, out.t())["params"][at + 1 :] != given[at + 1 :]
    assert plan(MM, empty(5, 0), empty(0, 7), None)["grid"] > 0  # zeros: still launched
    assert plan(MM, empty(0, 4), empty(4, 3), None)["empty"]


CASES = """
import json, sys, torch, ntops_prebuilt as nt
def plan(key, *args):
    args = [torch.empty(a, dtype=torch.float16) if isinstance(a, list) else a for a in args]
    dtypes = {"indices": torch.long, "bool": torch.bool}
    args = [
        torch.zeros(*a.values(), dtype=dtypes[next(iter(a))]) if isinstance(a, dict) else a
        for a in args
    ]
    try:
        chosen = nt._C.plan(nt._C.group(key), 80, *args)
        return {"kernel": chosen["kernel"], "params": chosen["params"]}
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}
print(json.dumps([plan(*case) for case in json.loads(sys.argv[1])]))
"""


@pytest.fixture(scope="module")
def products(tmp_path_factory):
    """bmm, addmm, embedding, the norms and one attention variant (not in the session's
    wheel: bmm has no 1-D or 2-D variants) in a wheel of their own, planned in a process
    of its own."""
    folder = tmp_path_factory.mktemp("products")
    ops = ("bmm", "addmm", "embedding", "rms_norm", "layer_norm")
    options = pipeline.BuildOptions(
        arches=("sm_80",),
        ops=(*ops, "scaled_dot_product_attention"),
        variants=(*(f"{op}-*" for op in ops), f"{SDPA_VARIANT}"),
        dtypes=("fp16",),
        tuning=False,
        build_dir=folder,
        out_dir=folder / "dist",
        jobs=2,
    )
    site = install(pipeline.build(options).wheel, folder / "site")

    def plan(*cases):
        environ = {**os.environ, "PYTHONPATH": str(site)}
        command = [sys.executable, "-c", CASES, json.dumps(cases)]
        said = subprocess.run(command, capture_output=True, text=True, env=environ, check=True)
        return json.loads(said.stdout)

    return plan


def test_bmm_of_batches_that_differ_is_refused(products):
    batches, inner, output, fine = products(
        (BMM, [2, 8, 16], [3, 16, 4], None),
        (BMM, [2, 8, 16], [2, 15, 4], None),
        (BMM, [2, 8, 16], [2, 16, 4], [2, 8, 5]),
        (BMM, [2, 8, 16], [2, 16, 4], None),
    )
    assert batches["error"] == "ValueError"
    assert batches["message"] == (
        "bmm: input has shape (2, 8, 16) and other has shape (3, 16, 4); "
        "their batch dims must be equal"
    )
    assert "their inner dims must be equal" in inner["message"]
    assert output["message"] == (
        "bmm: output has shape (2, 8, 5), but the result has shape (2, 8, 4)"
    )
    assert fine["kernel"].startswith("bmm-sm_80-fp16-nd3")


def test_addmm_broadcasts_its_input_to_the_product(products):
    """As torch broadcasts it: stride 0 where it has size 1 or no dim; anything else is
    refused by the launcher, which sees the input as the caller gave it."""
    mats = ([8, 16], [16, 4], 1.0, 1.0)
    row, column, scalar, full, short, extra, out = products(
        (ADDMM, [4], *mats, None),
        (ADDMM, [8, 1], *mats, None),
        (ADDMM, [], *mats, None),
        (ADDMM, [8, 4], *mats, None),
        (ADDMM, [3], *mats, None),
        (ADDMM, [2, 8, 4], *mats, None),
        (ADDMM, [4], *mats, [8, 5]),
    )
    # The input's parameters: its pointer, sizes (8, 4) and strides.
    assert row["params"][1:5] == [8, 4, 0, 1]
    assert column["params"][1:5] == [8, 4, 1, 0]
    assert scalar["params"][1:5] == [8, 4, 0, 0]
    assert full["params"][1:5] == [8, 4, 4, 1]
    assert short["message"] == "addmm: input has shape (3,), which does not broadcast to (8, 4)"
    assert "(2, 8, 4), which does not broadcast to (8, 4)" in extra["message"]
    assert out["message"] == "addmm: output has shape (8, 5), but the result has shape (8, 4)"


def test_embedding_gathers_a_row_per_index_of_the_weights_width(products):
    """embedding names its dims too: the launcher checks indices against the output
    and allocates (rows, columns) from the indices and the weight."""
    key = "embedding-index=i64"
    allocated, wrong, flat = products(
        (key, {"indices": [23]}, [50, 48], None),
        (key, {"indices": [23]}, [50, 48], [23, 40]),
        (key, {"indices": [2, 3]}, [50, 48], None),
    )
    assert allocated["kernel"].startswith("embedding-sm_80-fp16-nd1-index=i64")
    assert wrong["message"] == (
        "embedding: output has shape (23, 40), but the result has shape (23, 48)"
    )
    assert flat["message"] == "embedding: input must be 1-D, not 2-D"


def test_norms_check_their_weight_against_the_rows(products):
    """A weight or bias of another length than the rows' last dim would be read past
    its end: the launcher refuses it (the rows' dims coalesce; their last is named)."""
    rms, fine, layer, bias = products(
        ("rms_norm-weight=given", [6, 42, 123], [100], 1e-6, 0, None),
        ("rms_norm-weight=given", [6, 42, 123], [123], 1e-6, 0, None),
        ("layer_norm-weight=given-bias=given", [6, 64], [64], [63], 1e-5, None),
        ("layer_norm-weight=none-bias=given", [6, 64], [65], 1e-5, None),
    )
    assert rms["message"] == (
        "rms_norm: input has shape (6, 42, 123) and weight has shape (100,); "
        "their columns dims must be equal"
    )
    assert fine["kernel"].startswith("rms_norm-sm_80-fp16")
    assert layer["message"].endswith("bias has shape (63,); their columns dims must be equal")
    assert "bias has shape (65,)" in bias["message"]


def test_attention_checks_heads_head_dim_mask_and_rows(products):
    """Attention's output is (batch, heads_kv, group * seq_q, head_dim): the launcher
    derives its rows from the heads, refuses a head_dim the kernel was not built for,
    heads that do not group, and a mask or cache of other sizes."""

    def call(heads_q=8, heads_kv=2, seq_q=3, seq_kv=16, head_dim=64, rows=None, mask=None):
        rows = heads_q // heads_kv * seq_q if rows is None else rows
        kv = [1, heads_kv, seq_kv, head_dim]
        mask = mask or [1, heads_q, seq_q, seq_kv]
        query = [1, heads_q, seq_q, head_dim]
        out = [1, heads_kv, rows, head_dim]
        return (SDPA, out, query, kv, kv, kv, kv, 0, {"bool": mask}, 0.125)

    fine, head_dim, grouped, rows, mask = products(
        call(),
        call(head_dim=80),
        call(heads_q=6, heads_kv=4, rows=6),
        call(rows=10),
        call(mask=[1, 8, 3, 15]),
    )
    assert fine["kernel"].startswith(SDPA_VARIANT)
    assert head_dim["message"] == (
        "scaled_dot_product_attention: query has shape (1, 8, 3, 80), "
        "but its head_dim dim must be 64"
    )
    assert grouped["message"] == (
        "scaled_dot_product_attention: heads_q/heads_kv*seq_q: 6 is not a multiple of heads_kv (4)"
    )
    assert rows["message"] == (
        "scaled_dot_product_attention: output has shape (1, 2, 10, 64), "
        "but the result has shape (1, 2, 12, 64)"
    )
    assert mask["message"] == (
        "scaled_dot_product_attention: key has shape (1, 2, 16, 64) and mask has shape "
        "(1, 8, 3, 15); their seq_kv dims must be equal"
    )
