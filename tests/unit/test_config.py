"""Options layered once (command line > NTOPS_AOT_* > [tool.ntops-aot] > defaults),
the exit code of each kind of failure, `inspect`, and what a cache key covers."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

from ntops_aot.aot import config
from ntops_aot.aot.errors import ConfigError, UsageError
from ntops_aot.aot.store import cache as caching
from ntops_aot.aot.store.fingerprint import Sources
from ntops_aot.aot.toolchain import versions

PYPROJECT = """
[tool.ntops-aot]
arch = ["sm_80", "sm_86"]
ops = "soft*"
jobs = 3
timeout = 60
build-dir = "build/gen"
keep-going = true
"""


def cli(*args, cwd=None, environ=None):
    command = [sys.executable, "-m", "ntops_aot.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environ)


def test_defaults_without_any_layer(tmp_path):
    options = config.resolve({}, environ={}, project=tmp_path)
    assert options.arches == ("sm_90",)
    assert options.ops == ("all",)
    assert options.jobs == config.default_jobs()
    assert options.timeout == 900
    assert options.cache_root == pathlib.Path("generated/cache")


def test_the_options_table_is_what_build_options_and_help_default_to(tmp_path):
    """One table of defaults: BuildOptions, the layers with nothing set and the help
    text of every command all say what config.OPTIONS says."""
    from click.testing import CliRunner

    from ntops_aot.cli.main import main

    layered = config.resolve({}, environ={}, project=tmp_path)
    for option in config.OPTIONS.values():
        default = option.default() if callable(option.default) else option.default
        assert getattr(config.BuildOptions(), option.field) == default, option.field
        assert getattr(layered, option.field) == default, option.field
    for command in ("build", "tune", "list", "merge"):
        said = " ".join(CliRunner().invoke(main, [command, "--help"]).output.split())
        for name, option in config.OPTIONS.items():
            if f"--{name} " in said and option.help_default is not None:
                assert f"[default: {option.help_default}] [env {config.env_name(name)}]" in said


def test_a_command_line_reads_back_as_the_options_it_was_written_from(tmp_path):
    from ntops_aot.cli import main as cli_main

    options = config.BuildOptions(
        arches=("sm_80", "sm_90"),
        ops=("add", "soft*"),
        ndims=(1, 2),
        variants=("rms_norm-sm_90-fp16-nd2-weight=given",),
        build_dir=tmp_path / "a dir",
        jobs=1,
        timeout=None,
        max_memory=512,
        keep_going=True,
        shard=(2, 3),
        num_warps=4,
        tuning=False,
    )
    values = {name: getattr(options, option.field) for name, option in config.OPTIONS.items()}
    written = config.command_line("build", values)
    assert written.startswith("ntops-aot build --arch sm_80,sm_90 --ops 'add,soft*' ")
    import shlex

    context = cli_main.build_command.make_context("build", shlex.split(written)[2:])
    assert cli_main._resolve(context.params) == options


def test_a_reproducer_builds_its_variant_alone_with_the_options_that_reach_the_compiler():
    from ntops_aot.aot.declare.space import Variant
    from ntops_aot.aot.plan.stage import reproduce

    variant = Variant("neg", "sm_80", "fp16", 2, widest=True)
    options = config.BuildOptions(ndims=(1, 2), num_stages=2, tuning=False, jobs=8)
    assert reproduce(variant, options) == (
        "ntops-aot build --arch sm_80 --ops neg --ndims 1,2 --variants neg-sm_80-fp16-nd2 "
        "--jobs 1 --num-stages 2 --no-tuning"
    )
    tuning = dataclasses.replace(options, candidates=True, tuning=True)
    assert reproduce(variant, tuning).startswith("ntops-aot tune --arch sm_80 --ops neg ")


def test_each_layer_overrides_the_one_below(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    project = config.resolve({}, environ={}, project=tmp_path)
    assert project.arches == ("sm_80", "sm_86")
    assert project.ops == ("soft*",)
    assert (project.jobs, project.timeout, project.keep_going) == (3, 60, True)
    # Paths in pyproject.toml are relative to its folder.
    assert project.build_dir == tmp_path / "build" / "gen"

    environ = {"NTOPS_AOT_JOBS": "5", "NTOPS_AOT_CACHE_DIR": "/ci/cache", "NTOPS_AOT_ARCH": "all"}
    from_env = config.resolve({}, environ=environ, project=tmp_path)
    assert (from_env.jobs, from_env.arches, from_env.ops) == (5, ("all",), ("soft*",))
    assert from_env.cache_root == pathlib.Path("/ci/cache")

    given = {"jobs": "7", "arch": None, "keep-going": False, "timeout": "none"}
    from_cli = config.resolve(given, environ=environ, project=tmp_path)
    assert (from_cli.jobs, from_cli.arches) == (7, ("all",))
    assert (from_cli.keep_going, from_cli.timeout) == (False, None)


@pytest.mark.parametrize(
    ("environ", "pyproject", "said"),
    [
        ({"NTOPS_AOT_JOBZ": "2"}, "", "unknown setting NTOPS_AOT_JOBZ"),
        ({"NTOPS_AOT_JOBS": "many"}, "", "environment NTOPS_AOT_JOBS: 'many': expected an integer"),
        ({"NTOPS_AOT_KEEP_GOING": "maybe"}, "", "expected true or false"),
        ({}, "[tool.ntops-aot]\njobz = 2\n", "unknown keys ['jobz'] in [tool.ntops-aot]"),
        ({}, "[tool.ntops-aot]\nshard = '3'\n", "[tool.ntops-aot]: '3': expected K/N"),
        ({}, "[tool.ntops-aot\n", "pyproject.toml"),
    ],
)
def test_bad_settings_name_where_they_came_from(tmp_path, environ, pyproject, said):
    (tmp_path / "pyproject.toml").write_text(pyproject)
    with pytest.raises(ConfigError, match=None) as raised:
        config.resolve({}, environ=environ, project=tmp_path)
    assert said in str(raised.value)


def test_bad_values_on_the_command_line_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="--shard K/N needs 1 <= K <= N, not 3/2"):
        config.resolve({"shard": "3/2"}, environ={}, project=tmp_path)
    with pytest.raises(UsageError, match="--jobs must be at least 1"):
        config.resolve({"jobs": "0"}, environ={}, project=tmp_path)


def test_exit_codes_by_kind_of_failure(tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NTOPS_AOT")}
    usage = cli("build", "--arch", "sm_75", "--build-dir", tmp_path, environ=environ)
    assert usage.returncode == 2
    assert "arches: sm_80, sm_86, sm_89, sm_90, sm_100, sm_120, all" in usage.stderr

    bad_env = cli("list", "--build-dir", tmp_path, environ={**environ, "NTOPS_AOT_JOBZ": "1"})
    assert bad_env.returncode == 3
    assert "ntops-aot: error: unknown setting NTOPS_AOT_JOBZ" in bad_env.stderr

    (tmp_path / "pyproject.toml").write_text("[tool.ntops-aot]\nops = 'softm*'\ndtypes = 'fp16'\n")
    listed = cli("list", "--build-dir", tmp_path / "gen", cwd=tmp_path, environ=environ)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["softmax-sm_90-fp16-nd2", "softmax-sm_90-fp16-nd3"]

    (tmp_path / "not-a-wheel.whl").write_text("hello")
    not_a_wheel = cli("inspect", tmp_path / "not-a-wheel.whl", environ=environ)
    assert not_a_wheel.returncode == 7
    assert "not an ntops_prebuilt wheel" in not_a_wheel.stderr


def test_help_names_each_options_environment_variable():
    run = cli("build", "--help")
    for option in config.OPTIONS:
        if option not in ("variants",):
            assert config.env_name(option) in run.stdout.replace("\n", " "), option


def test_inspect_prints_the_manifest(small_build):
    run = cli("inspect", small_build.wheel)
    assert run.returncode == 0, run.stderr
    said = run.stdout
    assert small_build.wheel.name in said
    assert "arches       sm_80, sm_90" in said
    assert "ops          4: add, comparison, mm, softmax" in said
    assert "(cubins for sm_80)" in said
    assert "(cubins for sm_90a)" in said
    assert "triton 3.9.0" in said
    assert "MB installed" in said
    assert "failed       0" in said
    as_json = cli("inspect", small_build.wheel, "--json")
    assert '"variants"' in as_json.stdout


def test_an_op_key_covers_its_file_and_the_project_modules_it_imports():
    sources = Sources()
    softmax = set(sources.closure(["ntops_aot.kernels.softmax"]))
    assert {"ntops_aot.kernels.softmax", "ntops_aot.kernels._lib.reduction"} <= softmax
    assert "ntops_aot.kernels._lib.element_wise" not in softmax
    abs_ = set(sources.closure(["ntops_aot.kernels.abs"]))
    assert "ntops_aot.kernels._lib.element_wise" in abs_
    compiler = set(sources.closure(caching.COMPILER_MODULES))
    assert {
        "ntops_aot.aot.compile.cubins",
        "ntops_aot.aot.compile.codegen",
        "ntops_aot.aot.toolchain.compilers",
    } <= compiler


def _imported_project_modules(modules):
    """The ntops_aot modules a fresh interpreter holds after importing `modules`."""
    code = (
        "import json, sys\n"
        f"for name in {list(modules)!r}: __import__(name)\n"
        "print(json.dumps(sorted(n for n, m in sys.modules.items()\n"
        "    if n.startswith('ntops_aot.') and getattr(m, '__file__', None))))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(run.stdout.splitlines()[-1]))


@pytest.mark.parametrize("kernel", ["abs", "mm", "scaled_dot_product_attention"])
def test_a_kernel_key_covers_every_project_module_compiling_it_imports(kernel):
    """What the compile stage really imports, relative imports included, is what a
    kernel's key hashes: an edit to any of those modules recompiles the kernel."""
    module = f"ntops_aot.kernels.{kernel}"
    imported = _imported_project_modules([module, *caching.COMPILER_MODULES])
    covered = set(Sources().closure([module, *caching.COMPILER_MODULES]))
    assert imported <= covered, sorted(imported - covered)
    assert "ntops_aot.aot.package.render" not in covered  # rendering recompiles nothing


def test_a_key_covers_the_toolchain_triton_settings_variant_and_options(registry):
    from ntops_aot.aot.plan import select as enumeration

    variants = enumeration.variants(registry, ["abs"], ["sm_80", "sm_90"], ("fp16",), (1,))
    module = registry["abs"].module.__name__
    compilers = versions.read().compilers()
    keys = caching.Keys({}, compilers)

    def key(keys=keys, variant=variants[0], options=None):
        return keys.variant(variant, module, options or {"num_warps": None})

    for same in ({"TRITON_CACHE_DIR": "/elsewhere"}, {"TRITON_DISABLE_LINE_INFO": "1"}):
        assert key() == key(caching.Keys(same, compilers))
    assert key() != key(caching.Keys({"TRITON_F32_DEFAULT": "ieee"}, compilers))
    assert key() != key(variant=variants[1])
    assert key() != key(options={"num_warps": 8})
    assert key() != key(caching.Keys({}, {**compilers, "triton": "0.0.0"}))


def test_wheel_per_arch_writes_one_wheel_per_arch(small_build, build_dir, tmp_path):
    import dataclasses
    import json
    import zipfile

    from ntops_aot.aot import build as pipeline
    from tests.unit.conftest import SMALL

    options = dataclasses.replace(
        SMALL, build_dir=build_dir, out_dir=tmp_path, jobs=2, wheel_per_arch=True
    )
    result = pipeline.build(options)
    assert result.compiled == 0
    names = [path.name for path in result.outputs]
    assert names == [
        "ntops_prebuilt-0.1.0-cp310-abi3-" + names[0].split("-abi3-")[1],
        "ntops_prebuilt-0.1.0+sm80-cp310-abi3-" + names[0].split("-abi3-")[1],
        "ntops_prebuilt-0.1.0+sm90-cp310-abi3-" + names[0].split("-abi3-")[1],
    ]
    for path, arch in zip(result.outputs[1:], ("sm_80", "sm_90"), strict=True):
        with zipfile.ZipFile(path) as archive:
            manifest = json.loads(archive.read("ntops_prebuilt/manifest.json"))
        assert manifest["build"]["arches"] == [arch]
        assert {variant["arch"] for variant in manifest["variants"]} == {arch}
    assert result.outputs[0].read_bytes() == small_build.wheel.read_bytes()
