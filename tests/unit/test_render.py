"""Stage 4: the launcher's C, hand-written and rendered, compiled with warnings as errors."""

import pathlib
import re
import subprocess
import sysconfig
import types

import jinja2
import pytest

from ntops_aot.aot.declare.arguments import Arg
from ntops_aot.aot.errors import UnsupportedKernel
from ntops_aot.aot.package import cexpr, render
from ntops_aot.aot.package import wheel as package

STRICT = ("-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wstrict-prototypes", "-Wmissing-prototypes")
# The launcher's layers, each seeing less than the one above: the core (the kernel tables,
# shapes, layout, kernel choice) sees neither CUDA nor CPython; the driver layer sees
# CUDA only; the binding (every other file) is all that sees CPython.
CORE = ("kernels.c", "shapes.c", "layout.c", "select.c")
DRIVER = ("driver.c", "devices.c", "functions.c", "launch.c")
HEADERS = {"core": {"ntops.h", "generated.h", "grid.h", "core.h"}, "driver": {"driver.h", "cu.h"}}


def test_generated_c_compiles_with_warnings_as_errors(small_build, build_dir, tmp_path):
    sources = {
        path.name: path.read_text()
        for path in (build_dir / "extension" / "all").iterdir()
        if path.suffix in (".c", ".h", ".S")
    }
    assert set(sources) == set(render.TEMPLATES) | set(render.launcher_sources())
    output = package.compile_extension(sources, tmp_path, extra_flags=STRICT)
    assert output.stat().st_size > 0


def test_the_core_compiles_without_python_or_cuda(small_build, build_dir, tmp_path):
    folder = build_dir / "extension" / "all"
    python = pathlib.Path(sysconfig.get_paths()["include"])
    cuda = [f"-I{path}" for path in package.include_dirs() if path != python]

    def compiles(name, include):
        command = [package.compiler(), "-std=gnu11", *STRICT, *include, f"-I{folder}", "-c"]
        run = subprocess.run(
            [*command, str(folder / name), "-o", str(tmp_path / f"{name}.o")], capture_output=True
        )
        return run.returncode == 0

    assert all(compiles(name, []) for name in CORE)
    assert all(compiles(name, cuda) for name in DRIVER)
    assert not compiles("launch.c", [])  # the driver needs cuda.h: the test can tell
    assert not compiles("module.c", cuda)  # the binding needs Python.h


def test_the_launchers_includes_go_one_way():
    """No include cycles: the core includes only the core's headers, the driver layer
    no binding header; and the includes of every file form a DAG."""
    templates = pathlib.Path(render.__file__).parents[1] / "templates"
    sources = {
        **render.launcher_sources(),
        **{name: (templates / f"{name}.j2").read_text() for name in render.TEMPLATES},
    }
    includes = {
        name: set(re.findall(r'^#include "([^"]+)"', text, re.MULTILINE))
        for name, text in sources.items()
    }
    core, driver = HEADERS["core"], HEADERS["driver"]
    for name in [*CORE, *core]:
        assert includes[name] <= core, name
    for name in [*DRIVER, *driver]:
        assert includes[name] <= core | driver, name
    _assert_acyclic(includes, "include")


def test_the_launchers_calls_go_one_way(small_build, build_dir, tmp_path):
    """No call cycles: which file's functions (and tables) each file uses, read from
    the compiled objects' symbols, is a DAG."""
    folder = build_dir / "extension" / "all"
    python = pathlib.Path(sysconfig.get_paths()["include"])
    include = [f"-I{path}" for path in [python, *package.include_dirs(), folder]]
    defined, used = {}, {}
    for source in sorted(folder.glob("*.c")):
        compiled = tmp_path / f"{source.stem}.o"
        command = [
            package.compiler(),
            "-std=gnu11",
            "-fPIC",
            f"-DPy_LIMITED_API={package.LIMITED_API}",
        ]
        subprocess.run([*command, *include, "-c", str(source), "-o", str(compiled)], check=True)
        table = subprocess.run(["nm", str(compiled)], capture_output=True, text=True, check=True)
        used[source.name] = set()
        for line in table.stdout.splitlines():
            kind, name = line.split()[-2:]
            if kind == "U":
                used[source.name].add(name)
            elif kind in "TDBR":
                defined[name] = source.name
    calls = {
        name: {defined[symbol] for symbol in symbols if symbol in defined} - {name}
        for name, symbols in used.items()
    }
    assert "errors.c" in calls["reading.c"]  # the symbols were read: the test can tell
    _assert_acyclic(calls, "call")


def _assert_acyclic(edges, what):
    done: set[str] = set()
    while len(done) < len(edges):
        ready = {name for name in edges if name not in done and edges[name] <= done}
        assert ready, f"an {what} cycle among {sorted(set(edges) - done)}"
        done |= ready


def test_generated_sources_say_so_and_hand_written_ones_are_plain_c(small_build, build_dir):
    for name in render.TEMPLATES:
        text = (build_dir / "extension" / "all" / name).read_text()
        assert text.startswith("/* Generated by ntops-aot")
        assert f"templates/{name}.j2" in text
    hand_written = render.launcher_sources()
    assert {"ntops.h", "driver.c", "shapes.c"} <= set(hand_written)
    assert not set(hand_written) & set(render.TEMPLATES)
    for name, text in hand_written.items():
        assert "{{" not in text, name
        assert "{%" not in text, name
        assert (build_dir / "extension" / "all" / name).read_text() == text


def test_templates_are_strict():
    env = render.environment()
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("kernels.c.j2").render(version="0")


def test_grids_become_integer_c():
    names = {"n": "N", "m": "M"}
    assert cexpr.to_c("(n - 1) // 1024 + 1", names) == (
        "(nt_floordiv((N - INT64_C(1)), INT64_C(1024)) + INT64_C(1))"
    )
    assert cexpr.to_c("-m * 2 % n", names) == "nt_floormod(((-M) * INT64_C(2)), N)"
    assert cexpr.to_c("min(n, m * 2)", names) == "nt_min(N, (M * INT64_C(2)))"
    assert cexpr.to_c("parts(n, m, 4)", names) == "nt_parts(N, M, INT64_C(4))"
    for unsupported in ("n / 2", "n ** 2", "abs(n)", "max(n)", "k + 1", "n + 0.5", "parts(n, m)"):
        with pytest.raises(UnsupportedKernel):
            cexpr.to_c(unsupported, names)


def _run_harness(build_dir, tmp_path, body):
    """Compile `body` (C statements) against the small build's kernels.c and run it:
    its standard output's lines."""
    harness = tmp_path / "harness.c"
    harness.write_text(
        f'#include <stdio.h>\n#include "kernels.c"\nint main(void) {{\n{body}    return 0;\n}}\n'
    )
    include = [f"-I{path}" for path in [*package.include_dirs(), build_dir / "extension" / "all"]]
    binary = tmp_path / "harness"
    cubins = build_dir / "extension" / "all" / "cubins.S"
    command = [package.compiler(), "-std=gnu11", *include, str(harness), str(cubins), "-o"]
    subprocess.run([*command, str(binary)], check=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    return [line for line in run.stdout.split("\n") if line]


def test_grid_arithmetic_matches_python(small_build, build_dir, tmp_path):
    """nt_floordiv and nt_floormod as compiled must give Python's answers."""
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 5), (-1, 1024), (1023, 1024), (2**40 + 3, 7)]
    calls = "".join(
        f'    printf("%lld %lld\\n", (long long)nt_floordiv({a}LL, {b}LL),'
        f" (long long)nt_floormod({a}LL, {b}LL));\n"
        for a, b in pairs
    )
    lines = _run_harness(build_dir, tmp_path, calls)
    assert [tuple(map(int, line.split())) for line in lines] == [(a // b, a % b) for a, b in pairs]


def parts(tiles, slots, most):
    """Split K's parts as the launcher's nt_parts (csrc/grid.h, the rule's home) picks
    them, stated again here as the tests' oracle: the fewest (1 to `most`) whose
    programs fill their last wave over `slots` multiprocessors to 90% or more (in whole
    percent), else the first of those that fill it most."""
    best, best_fill = 1, -1
    if tiles <= 0 or slots <= 0:
        return 1
    for count in range(1, most + 1):
        programs = tiles * count
        fill = programs * 100 // (-(-programs // slots) * slots)
        if fill >= 90:
            return count
        if fill > best_fill:
            best, best_fill = count, fill
    return best


def test_split_parts_match_the_rule(small_build, build_dir, tmp_path):
    """The launcher's nt_parts, as compiled, picks the parts the rule says."""
    cases = [(t, s, m) for t in range(0, 700, 7) for s in (66, 78, 114, 132) for m in (1, 4, 8)]
    calls = "".join(
        f'    printf("%lld\\n", (long long)nt_parts({t}LL, {s}LL, {m}LL));\n' for t, s, m in cases
    )
    lines = _run_harness(build_dir, tmp_path, calls)
    assert [int(line) for line in lines] == [parts(*case) for case in cases]


def _group(coalesce, *args, switches=()):
    """A group and a stand-in of its compiled kernels (render reads their `args`)."""
    variant = types.SimpleNamespace(switches=switches, dtype="fp16")
    return render.GroupDef("op", "op", coalesce, False), [
        types.SimpleNamespace(args=args, variant=variant)
    ]


def _named(group, members):
    return [(dim.name, dim.size, dim.factors) for dim in render._names(group, members)]


def test_named_dims_are_checked_as_the_launcher_needs_them():
    arg = Arg
    rows = arg("input", 2, "fp16", dims=("rows", "inner"))
    columns = arg("other", 2, "fp16", dims=("inner", "columns"))
    output = arg("output", 2, "fp16", output=True, dims=("rows", "columns"))
    names = render._names(*_group("none", rows, columns, output))
    assert [dim.name for dim in names] == ["rows", "inner", "columns"]
    bias = arg("bias", 1, "fp16", dims=("columns",), broadcast=True)
    assert render._names(*_group("none", bias, rows, columns, output))[0].name == "columns"
    cases = [
        (_group("none", arg("input", 2, "fp16", dims=("rows",))), "1 names for its 2 dims"),
        (_group("all", rows, columns), "dims of input, which the launcher coalesces"),
        (
            _group("none", arg("bias", 1, "fp16", dims=("n",), broadcast=True), rows),
            r"\['n'\] are named only by inputs that broadcast",
        ),
        (
            _group("none", arg("input", 11, "fp16", dims=tuple("abcdefghijk")), columns),
            "13 named dims; the launcher takes at most 12",
        ),
        (
            _group("leading", arg("input", 2, "fp16", dims=("rows", None))),
            "input names its trailing dims: each has a name",
        ),
        (
            _group("none", arg("input", 2, "fp16", dims=("a", "a/b"))),
            "only outputs the launcher does not coalesce have derived dims",
        ),
        (
            _group("none", rows, arg("output", 1, "fp16", output=True, dims=("rows/heads",))),
            r"each bound by an input \(not \['heads'\]\)",
        ),
        (
            _group("none", arg("a", 1, "fp16", dims=("d={d}",)), switches=(("d", "0"),)),
            "'d=0' is not a positive size",
        ),
        (
            _group("none", arg("a", 1, "fp16", dims=("d=64",)), arg("b", 1, "fp16", dims=("d",))),
            "dim d is spelled 'd=64' and 'd'",
        ),
    ]
    for (group, members), words in cases:
        with pytest.raises(UnsupportedKernel, match=words):
            render._names(group, members)


def test_named_dims_take_switches_trailing_names_and_derived_sizes():
    """Attention's spelling: head_dim compiled in from the variant's switch, its output
    rows derived from the heads; a norm names the trailing dim of its coalesced rows."""
    arg = Arg
    query = arg("query", 3, "fp16", dims=("heads_q", "seq_q", "head_dim={head_dim}"))
    key = arg("key", 3, "fp16", dims=("heads_kv", None, "head_dim={head_dim}"))
    output = arg(
        "output", 3, "fp16", output=True, dims=("heads_kv", "heads_q/heads_kv*seq_q", None)
    )
    group, members = _group("none", output, query, key, switches=(("head_dim", "96"),))
    assert _named(group, members) == [
        ("heads_kv", 0, ()),
        ("heads_q", 0, ()),
        ("seq_q", 0, ()),
        ("head_dim", 96, ()),
        ("heads_q/heads_kv*seq_q", 0, (2, -1, 3)),
    ]
    dims = [
        value["dims"][:3]
        for value in render._args(group, members, {"fp16": 0}, render._names(group, members))
    ]
    assert dims == [[0, 4, -1], [1, 2, 3], [0, -1, 3]]
    rows = arg("input", 2, "fp16", dims=("columns",))
    weight = arg("weight", 1, "fp16", fixed=True, dims=("columns",))
    assert _named(*_group("leading", rows, weight)) == [("columns", 0, ())]
