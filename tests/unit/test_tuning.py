"""Tuning tables: what a build compiles from them, and the errors bad ones get."""

import dataclasses
import json
import subprocess
import sys

import pytest

from ntops_aot.aot.config import BuildOptions
from ntops_aot.aot.declare import space
from ntops_aot.aot.declare.space import Config, Variant
from ntops_aot.aot.errors import TuningError
from ntops_aot.aot.plan import tuning
from ntops_aot.aot.plan.stage import plan
from ntops_aot.aot.toolchain import versions

CLI = (sys.executable, "-m", "ntops_aot.cli.main")
MM = Variant("mm", "sm_90", "bf16", 2, (("fp32_precision", "tf32"),))


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A plan of mm for sm_90 with no table, from a cache of its own."""
    root = tmp_path_factory.mktemp("tuning")
    options = BuildOptions(arches=("sm_90",), ops=("mm",), build_dir=root, tuning_dir=root / "none")
    return plan(options)


def table(path, entries, toolchain):
    data = {
        "format": 1,
        "arch": "sm_90",
        "provenance": {"gpu": "test", "toolchain": dict(toolchain)},
        "entries": entries,
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "sm_90.json").write_text(json.dumps(data))
    return path


def entry(config):
    return {"config": config.as_dict(), "us": [1.0]}


def plan_with(planned, directory):
    return plan(dataclasses.replace(planned.options, tuning_dir=directory))


def test_without_a_table_each_bucket_has_its_declared_default(planned):
    op = planned.ops["mm"]
    assert op.tuning.names == (
        *("decode", "decode-wide", "small", "small-wide", "batched", "batched-wide"),
        *("medium", "medium-wide", "large", "large-mid", "large-wide"),
        *("larger", "larger-mid", "larger-wide", "chunk", "chunk-wide"),
        *("prefill", "prefill-wide"),
    )
    choices = planned.choices[MM.id]
    assert {bucket: choice.source for bucket, choice in choices.items()} == dict.fromkeys(
        op.tuning.names, "default"
    )
    assert choices["prefill"].config.persistent == 1
    assert choices["decode"].config.premake["block_size_m"] == 16


def test_a_table_entry_replaces_one_bucket_and_rekeys_only_its_variant(planned, tmp_path):
    op = planned.ops["mm"]
    winner = op.candidates[MM.id]["decode"][2]
    directory = table(tmp_path, {MM.id: {"decode": entry(winner)}}, versions.read().compilers())
    tuned = plan_with(planned, directory)
    choices = tuned.choices[MM.id]
    assert choices["decode"].config.key == winner.key
    assert choices["decode"].source == "sm_90.json (--tuning-dir)"  # no paths in wheels
    assert choices["prefill"].source == "default"
    changed = {v for v in tuned.keys if tuned.keys[v] != planned.keys[v]}
    assert changed == {MM.id}  # fp16 and fp32 keep their keys: nothing else recompiles


def test_a_table_from_another_toolchain_is_refused(planned, tmp_path):
    toolchain = {**versions.read().compilers(), "triton": "0.0.1"}
    winner = planned.ops["mm"].candidates[MM.id]["decode"][1]
    directory = table(tmp_path, {MM.id: {"decode": entry(winner)}}, toolchain)
    with pytest.raises(TuningError, match=r"measured with triton 0\.0\.1") as caught:
        plan_with(planned, directory)
    assert MM.id in str(caught.value)
    assert "--no-tuning" in str(caught.value)


def test_a_configuration_the_kernel_file_does_not_declare_is_refused(planned, tmp_path):
    stranger = Config({"block_size_m": 32, "block_size_n": 32, "block_size_k": 32}, 4, 2)
    directory = table(tmp_path, {MM.id: {"decode": entry(stranger)}}, versions.read().compilers())
    with pytest.raises(TuningError) as caught:
        plan_with(planned, directory)
    message = str(caught.value)
    assert f"entry {MM.id} / decode" in message
    assert "is not among the candidates kernels/mm.py declares" in message


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ({"mm-sm_90-bf16-nd7-fp32_precision=tf32": {}}, "names no variant"),
        ({MM.id: {"tiny": {}}}, "has no bucket 'tiny'"),
        ({MM.id: {"decode": {"config": {"warps": 4}}}}, "not a configuration"),
    ],
)
def test_entries_that_name_nothing_are_refused(planned, tmp_path, entries, says):
    directory = table(tmp_path, entries, versions.read().compilers())
    with pytest.raises(TuningError, match=says):
        plan_with(planned, directory)


def test_no_tuning_builds_the_defaults(planned, tmp_path):
    winner = planned.ops["mm"].candidates[MM.id]["decode"][1]
    directory = table(tmp_path, {MM.id: {"decode": entry(winner)}}, versions.read().compilers())
    options = dataclasses.replace(planned.options, tuning_dir=directory, tuning=False)
    assert plan(options).keys == planned.keys


def test_buckets_that_chose_alike_share_kernels():
    ask = space.Tuning(
        "mm",
        "mm",
        ("input", -2),
        (space.Bucket("a", 8), space.Bucket("b", 64), space.Bucket("c")),
    )
    small, large = Config({"block_size_m": 16}, 4, 4), Config({"block_size_m": 128}, 8, 3)
    choices = {
        "a": tuning.Choice(small, "default"),
        "b": tuning.Choice(small, "t.json"),
        "c": tuning.Choice(large, "default"),
    }
    default = Config({"block_size_m": 64}, 4, 3)
    found = tuning.builds(ask, choices, {"a": small, "b": small, "c": default})
    every = space.EVERY
    assert [(b.label, b.bucket, b.aligned) for b in found] == [
        ("@a+b", ((0, 64), every), True),
        ("@c", ((65, space.UNBOUNDED), every), True),
        ("", (every, every), False),  # the fallbacks: the last bucket's default
    ]
    assert found[-1].config.key == default.key


def test_columns_split_buckets_into_rectangles_that_share_kernels_only_when_adjacent():
    """A second key splits the buckets of one bound: each serves a rectangle of (rows,
    columns), and buckets that chose alike share kernels only where their rectangles
    join into one (the launcher keeps a range of each key per kernel)."""
    ask = space.Tuning(
        "mm",
        "mm",
        ("input", -2),
        (
            space.Bucket("a", 8, upto2=4096),
            space.Bucket("a-wide", 8),
            space.Bucket("b", 64, upto2=4096),
            space.Bucket("b-wide", 64),
            space.Bucket("c"),
        ),
        key2=("other", -1),
    )
    top = space.UNBOUNDED
    assert ask.ranges() == {
        "a": ((0, 8), (0, 4096)),
        "a-wide": ((0, 8), (4097, top)),
        "b": ((9, 64), (0, 4096)),
        "b-wide": ((9, 64), (4097, top)),
        "c": ((65, top), (0, top)),
    }
    narrow, wide = Config({"block_size_n": 32}, 4, 4), Config({"block_size_n": 64}, 4, 6)
    picked = {"a": narrow, "a-wide": narrow, "b": narrow, "b-wide": wide, "c": wide}
    choices = {name: tuning.Choice(config, "t.json") for name, config in picked.items()}
    found = tuning.builds(ask, choices, picked)
    assert [(b.label, b.bucket, b.config.key == narrow.key) for b in found[:-1]] == [
        ("@a+a-wide", ((0, 8), (0, top)), True),  # one bound's columns join
        ("@b", ((9, 64), (0, 4096)), True),  # not with a+a-wide: no rectangle
        ("@b-wide", ((9, 64), (4097, top)), False),
        ("@c", ((65, top), (0, top)), False),  # not with b-wide: no rectangle
    ]


@pytest.mark.parametrize(
    ("bounds", "says"),
    [
        ([(8, 64), (None, None)], "`upto2`; the last takes the rest"),  # 8's columns stop at 64
        ([(8, 64), (8, 32), (8, None), (None, None)], "`upto2` must increase"),
        ([(8, None), (64, None), (8, None), (None, None)], "`upto` must increase"),
        ([(8, None), (9, None)], "`upto`; the last takes the rest"),
    ],
)
def test_bucket_bounds_that_leave_sizes_out_are_refused(bounds, says):
    buckets = tuple(
        space.Bucket(f"b{i}", upto, upto2=upto2) for i, (upto, upto2) in enumerate(bounds)
    )
    with pytest.raises(ValueError, match=says):
        space.Tuning("mm", "mm", ("input", -2), buckets, key2=("other", -1))


def test_a_column_bound_needs_a_second_key():
    with pytest.raises(ValueError, match="key2"):
        space.Tuning("mm", "mm", ("input", -2), (space.Bucket("a", upto2=8), space.Bucket("b")))


def test_the_cli_reports_a_bad_table_with_exit_code_3(planned, tmp_path):
    directory = table(tmp_path, {MM.id: {"nowhere": {}}}, versions.read().compilers())
    run = subprocess.run(
        [*CLI, "list", "--ops", "mm", "--build-dir", tmp_path / "gen", "--tuning-dir", directory],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 3, run.stderr
    assert "has no bucket 'nowhere'" in run.stderr


def test_tune_refuses_ops_that_declare_no_tuning(tmp_path):
    run = subprocess.run(
        [*CLI, "tune", "--ops", "add", "--build-dir", tmp_path / "gen", "--out", tmp_path / "dist"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2, run.stderr
    assert "add: no TUNING declared; ops that tune: addmm, bmm, mm" in run.stderr


def test_the_committed_tables_fit_the_kernel_files(tmp_path):
    """Every table under kernels/tuning matches this toolchain and names only variants,
    buckets and configurations the kernel files declare."""
    from ntops_aot.aot.toolchain.targets import TARGETS

    arches = tuple(a for a in TARGETS if (tuning.tables_dir() / f"{a}.json").is_file())
    assert arches, "no committed tuning table"
    options = BuildOptions(arches=arches, ops=("all",), build_dir=tmp_path)
    planned = plan(options)
    tuned = {
        v
        for v, choices in planned.choices.items()
        if any(c.source != "default" for c in choices.values())
    }
    assert {v.split("-")[0] for v in tuned} == {"mm", "addmm", "bmm"}


def test_the_tuner_refuses_a_wheel_of_one_configuration(installed):
    from ntops_prebuilt import tune

    with pytest.raises(tune.TuningRunError, match="build a tuning wheel with `ntops-aot tune"):
        tune.tune()


def test_the_tuner_refuses_a_gpu_the_wheel_has_no_cubins_for(installed, monkeypatch):
    """A tuning wheel for sm_90 on an A100: the error names both arches and the command
    that builds the wheel that GPU needs."""
    import torch

    from ntops_prebuilt import tune

    manifest = dict(installed.manifest())
    manifest["build"] = {**manifest["build"], "candidates": True, "arches": ["sm_90"]}
    monkeypatch.setattr(installed, "manifest", lambda: manifest)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(tune.TuningRunError) as caught:
        tune.tune()
    message = str(caught.value)
    assert "this GPU (NVIDIA A100-SXM4-80GB) is sm_80" in message
    assert "cubins for sm_90 only" in message
    assert "ntops-aot tune --arch sm_80" in message


def test_every_tuning_names_functions_that_exist(registry):
    """A tuning run calls TUNING.function of ntops_prebuilt and TUNING.reference under
    torch (a dotted name), both with TUNING.options and those its switch_options add
    for a variant's switch values: the reference must exist, the runtime function
    (read from the runtime's source: it imports the wheel's _C) must take the options,
    and switch_options must name switches and values of the op's SPACE."""
    import ast
    import functools
    import pathlib

    import torch

    import ntops_aot.aot

    runtime = pathlib.Path(ntops_aot.aot.__file__).parent / "runtime"
    defined = {
        node.name: [arg.arg for arg in node.args.args + node.args.kwonlyargs]
        for path in runtime.glob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef)
    }
    declared = {n: op.tuning for n, op in registry.items() if op.tuning}
    assert {"mm", "scaled_dot_product_attention"} <= set(declared)
    for name, declaration in declared.items():
        if not any(bucket.samples for bucket in declaration.buckets):
            assert not declaration.reference, name  # buckets only: nothing to time
            continue
        assert callable(functools.reduce(getattr, declaration.reference.split("."), torch))
        assert declaration.function in defined, name
        takes = set(defined[declaration.function])
        assert set(declaration.options) <= takes, name
        switches = registry[name].space.switches
        for switch, values in declaration.switch_options.items():
            assert set(values) <= set(switches.get(switch, ())), (name, switch)
            for options in values.values():
                assert set(options) <= takes, (name, switch)
