"""Building at scale, end to end through the CLI: the cache (nothing changed, one op
edited, a shared tiling edited), reproducible bytes, a killed build, failures with
and without --keep-going, time and memory limits, shards and merge.

Each test builds from its own copy of the project's sources (kernels/, aot/, cli/),
put first on PYTHONPATH, so that it can edit a kernel file the way a user would."""

import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from ntops_aot.aot.store.cache import FORMAT
from tests.wheels import install

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Two element-wise ops (sharing kernels/_lib/element_wise.py) and one row op (kernels/
# _lib/reduction.py): six variants that compile in seconds.
SELECTION = ("--arch", "sm_80", "--ops", "abs,neg,rms_norm", "--dtypes", "fp16", "--ndims", "1,2")
ABS = {"abs-sm_80-fp16-nd1", "abs-sm_80-fp16-nd2"}
NEG = {"neg-sm_80-fp16-nd1", "neg-sm_80-fp16-nd2"}
RMS_NORM = {"rms_norm-sm_80-fp16-nd2-weight=given", "rms_norm-sm_80-fp16-nd2-weight=none"}
ALL = ABS | NEG | RMS_NORM
SUMMARY = re.compile(
    r": (\d+) variants \((\d+) compiled, (\d+) cached(?:, (\d+) FAILED)?\).* \(([\d.]+) s\)"
)


class Project:
    """A copy of the sources, and the CLI run from it."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.package = root / "src" / "ntops_aot"
        for folder in ("kernels", "aot", "cli"):
            shutil.copytree(
                ROOT / folder,
                self.package / folder,
                ignore=shutil.ignore_patterns("__pycache__"),
            )

    def environ(self, extra=None):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("NTOPS_AOT_")}
        environ["PYTHONPATH"] = str(self.root / "src")
        return {**environ, **(extra or {})}

    def command(self, *args):
        return [sys.executable, "-m", "ntops_aot.cli.main", *args]

    def run(self, *args, environ=None):
        return subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            cwd=self.root,
            env=self.environ(environ),
        )

    def build(self, name, *args, selection=SELECTION, build_dir=None):
        """`ntops-aot build` into out/NAME with the build dir `build_dir` (default
        gen/), and what it said."""
        out = self.root / "out" / name
        build_dir = build_dir or self.root / "gen"
        run = self.run("build", *selection, "--build-dir", build_dir, "--out", out, *args)
        return Build(run, out)

    def edit(self, path, text):
        file = self.package / path
        file.write_text(file.read_text() + text)


class Build:
    def __init__(self, run, out):
        self.run, self.out = run, out
        self.code = run.returncode
        self.stdout, self.stderr = run.stdout, run.stderr
        match = SUMMARY.search(run.stdout)
        self.variants, self.compiled, self.cached, failed, seconds = (
            match.groups() if match else (None,) * 5
        )
        self.failed = int(failed or 0)
        self.seconds = float(seconds) if seconds else None
        # Compiled variants: the progress log's lines (stderr is not a terminal here).
        self.compiled_ids = set(re.findall(r"^\[\d+/\d+\] (\S+) ", run.stderr, re.M))

    def ok(self):
        assert self.code == 0, self.stderr
        return self

    @property
    def wheel(self):
        (wheel,) = self.out.glob("*.whl")
        return wheel

    @property
    def sha256(self):
        return hashlib.sha256(self.wheel.read_bytes()).hexdigest()

    def manifest(self):
        with zipfile.ZipFile(self.wheel) as archive:
            return json.loads(archive.read("ntops_prebuilt/manifest.json"))


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One cold build of SELECTION, from its own copy: what every other build of the
    same selection must reproduce byte for byte."""
    built = Project(tmp_path_factory.mktemp("reference")).build("reference").ok()
    assert built.compiled_ids == ALL
    return built


def test_a_build_from_an_empty_cache_gives_the_same_bytes(project, reference):
    again = project.build("cold").ok()
    assert again.compiled_ids == ALL
    assert again.sha256 == reference.sha256


def test_nothing_changed_compiles_nothing_and_takes_seconds(project, reference):
    project.build("first").ok()
    again = project.build("again").ok()
    assert (again.compiled, again.cached) == ("0", "6")
    assert again.compiled_ids == set()
    assert again.seconds < 5, again.stdout
    assert again.sha256 == reference.sha256


def test_editing_one_op_recompiles_only_its_variants(project):
    project.build("first").ok()
    project.edit("kernels/abs.py", "\n# edited\n")
    again = project.build("again").ok()
    assert again.compiled_ids == ABS
    assert (again.compiled, again.cached) == ("2", "4")


def test_editing_a_shared_tiling_recompiles_exactly_its_users(project):
    project.build("first").ok()
    project.edit("kernels/_lib/element_wise.py", "\n# edited\n")
    assert project.build("element_wise").ok().compiled_ids == ABS | NEG
    project.edit("kernels/_lib/reduction.py", "\n# edited\n")
    assert project.build("reduction").ok().compiled_ids == RMS_NORM


def test_editing_the_compiler_recompiles_everything(project):
    project.build("first").ok()
    project.edit("aot/compile/cubins.py", "\n# edited\n")
    assert project.build("again").ok().compiled_ids == ALL


def test_the_cache_dir_is_shared_through_the_environment(project, reference):
    cache = project.root / "shared-cache"
    first = project.run(
        "build", *SELECTION, "--build-dir", project.root / "a", "--out", project.root / "a",
        environ={"NTOPS_AOT_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = project.build("again", "--cache-dir", cache, build_dir=project.root / "b").ok()
    assert again.compiled == "0"
    assert again.sha256 == reference.sha256


def test_two_builds_at_once_share_one_cache_safely(project, reference):
    """Two processes building the same selection into one --cache-dir at the same time
    (two CI jobs on a shared cache, say) both write whole entries: each gets the wheel
    a build alone gets, and a third build finds everything cached."""
    cache = project.root / "shared-cache"
    runs = []
    for name in ("one", "two"):
        out, build_dir = project.root / "out" / name, project.root / f"gen-{name}"
        command = project.command(
            "build", *SELECTION, "--build-dir", build_dir, "--out", out, "--cache-dir", cache
        )
        process = subprocess.Popen(
            command, cwd=project.root, env=project.environ(), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        runs.append((process, out))
    for process, out in runs:
        stdout, stderr = process.communicate(timeout=600)
        built = Build(
            subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), out
        )
        assert built.ok().sha256 == reference.sha256
    third = project.build("third", "--cache-dir", cache).ok()
    assert (third.compiled, third.cached) == ("0", "6")
    assert third.sha256 == reference.sha256
    assert not list(cache.rglob("*.partial")), "a torn entry was left behind"


def test_a_killed_build_finishes_from_the_cache_with_the_same_bytes(project, reference):
    out = project.root / "out" / "killed"
    process = subprocess.Popen(
        project.command("build", *SELECTION, "--build-dir", project.root / "gen", "--out", out),
        cwd=project.root,
        env=project.environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    entries = project.root / "gen" / "cache" / f"v{FORMAT}" / "kernels"
    deadline = time.monotonic() + 120
    while not list(entries.glob("*/*.pickle")) and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not out.exists() or not list(out.glob("*.whl"))
    stored = len(list(entries.glob("*/*.pickle")))
    assert 1 <= stored < len(ALL)

    again = project.build("again").ok()
    assert len(again.compiled_ids) <= len(ALL) - 1
    assert again.sha256 == reference.sha256


BROKEN = """

def application(input, output):
    output = ntl.no_such_function(input)  # noqa: F841
"""


def test_a_failing_variant_fails_the_build_with_its_id_error_and_reproducer(project):
    project.edit("kernels/neg.py", BROKEN)
    failed = project.build("failed")
    assert failed.code == 4, failed.stderr
    assert not list(failed.out.glob("*.whl"))
    assert "2 of 6 variants failed; no wheel was written" in failed.stderr
    for variant in NEG:
        assert variant in failed.stderr
    assert "no_such_function" in failed.stderr
    assert failed.stderr.count("reproduce") == 2  # one command per failed variant
    reproduce = re.search(r"reproduce: (ntops-aot build .*)", failed.stderr).group(1)
    assert "--variants neg-sm_80-fp16-nd" in reproduce

    # The command reproduces that one failure alone.
    words = [*reproduce.split()[1:], "--build-dir", str(project.root / "gen")]
    alone = project.run(*words, "--out", project.root / "alone")
    assert alone.returncode == 4
    assert "1 of 1 variants failed;" in alone.stderr
    assert "no_such_function" in alone.stderr


def test_keep_going_packages_the_rest_and_names_what_is_missing(project):
    project.edit("kernels/neg.py", BROKEN)
    partial = project.build("partial", "--keep-going")
    assert partial.code == 8, partial.stderr
    assert (partial.variants, partial.failed) == ("6", 2)
    manifest = partial.manifest()
    assert {failure["id"] for failure in manifest["failed"]} == NEG
    assert all("no_such_function" in failure["error"] for failure in manifest["failed"])
    built = {variant["id"] for variant in manifest["variants"] if variant["kernels"]}
    assert built == ABS | RMS_NORM

    # The runtime's error for a call that needed a failed variant names it.
    site = install(partial.wheel, project.root / "site")
    call = (
        "import torch, ntops_prebuilt\n"
        "x = torch.empty(8, dtype=torch.float16, device='meta')\n"
        "try:\n"
        "    ntops_prebuilt._C.plan(ntops_prebuilt._C.group('neg'), 80, x, x)\n"
        "except ntops_prebuilt.NotBuiltError as error:\n"
        "    print(error)\n"
    )
    said = subprocess.run(
        [sys.executable, "-c", call],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
    ).stdout
    assert "built with --keep-going" in said
    assert "neg-sm_80-fp16-nd1 (error: NameError('ntl is not defined'))" in said
    assert "reproduce" not in said


def test_a_variant_past_its_time_limit_is_killed_and_reported(project):
    failed = project.build("slow", "--timeout", "0.05", "--variants", "abs-*")
    assert failed.code == 4, failed.stderr
    assert "abs-sm_80-fp16-nd1 (timeout)" in failed.stderr
    assert "0.05 s" in failed.stderr


def test_a_variant_past_its_memory_limit_is_killed_and_reported(project):
    failed = project.build("big", "--max-memory", "40", "--variants", "abs-*-nd1")
    assert failed.code == 4, failed.stderr
    assert "abs-sm_80-fp16-nd1 (memory)" in failed.stderr
    assert "40 MiB" in failed.stderr


def test_shards_merge_into_the_wheel_of_a_single_build(project, reference):
    listed = [
        set(project.run("list", *SELECTION, "--shard", f"{k}/2").stdout.split()) for k in (1, 2)
    ]
    assert listed[0] | listed[1] == ALL
    assert listed[0]
    assert listed[1]
    assert not listed[0] & listed[1]

    files = []
    for k in (1, 2):
        built = project.build(f"shard{k}", "--shard", f"{k}/2").ok()
        (shard,) = built.out.glob("*")
        files.append(shard)
        assert built.compiled_ids == listed[k - 1]
    merged = project.run("merge", *files, "--build-dir", project.root / "gen", "--out", "merged")
    assert merged.returncode == 0, merged.stderr
    (wheel,) = (project.root / "merged").glob("*.whl")
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == reference.sha256

    missing = project.run("merge", files[0], "--out", "missing")
    assert missing.returncode == 6
    assert "shard 2/2 is missing" in missing.stderr
    twice = project.run("merge", files[0], files[0], "--out", "twice")
    assert twice.returncode == 6
    assert "shard 1/2 is given twice" in twice.stderr
    other = project.build("other", "--shard", "2/2", selection=SELECTION[:-2]).ok()
    (other_shard,) = other.out.glob("*")
    mixed = project.run("merge", files[0], other_shard, "--out", "mixed")
    assert mixed.returncode == 6
    assert "ndims" in mixed.stderr


def test_the_example_ci_workflow_builds_shards_and_merges_them(project, reference):
    """docs/ci/build-wheel.yml's commands, as its jobs run them, at small scale: its
    build step once per shard of its matrix (a selection made small through the
    options' environment variables), then its merge step; the wheel is the one a
    single build writes."""
    workflow = (ROOT / "docs" / "ci" / "build-wheel.yml").read_text()
    steps = dict(re.findall(r"- name: (.+)\n\s+run: (.+)", workflow))
    matrix = re.search(r"shard: \[([\d, ]+)\]", workflow)[1].split(", ")
    shards = re.search(r"SHARDS: (\d+)", workflow)[1]
    assert len(matrix) == int(shards)
    environ = project.environ(
        {
            "ARCHES": "sm_80",
            "OPS": "abs,neg,rms_norm",
            "SHARDS": "2",
            "NTOPS_AOT_DTYPES": "fp16",
            "NTOPS_AOT_NDIMS": "1,2",
            "NTOPS_AOT_BUILD_DIR": str(project.root / "gen"),
        }
    )
    cli = " ".join([sys.executable, "-m", "ntops_aot.cli.main"])

    def run(step, shard=None):
        command = steps[step].replace(".venv/bin/ntops-aot", cli)
        command = command.replace("${{ matrix.shard }}", str(shard))
        done = subprocess.run(
            ["bash", "-c", command], cwd=project.root, env=environ, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done

    for shard in (1, 2):
        run("Build shard", shard)
    assert len(list((project.root / "shards").glob("*"))) == 2
    run("Merge")
    (wheel,) = (project.root / "dist").glob("*.whl")
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == reference.sha256
