"""ntops_prebuilt.integrations.transformers on the CPU, with the README's wheel (`dist/`,
built by `ntops-aot build --arch sm_80 --ops all` before `make test`): the session's
small wheel has none of the ops the integration uses, and one process imports one
ntops_prebuilt, so tests/unit/transformers_*cases.py run in a pytest of their own, with
the full wheel installed into a folder on its path and their shared fixtures
(transformers_fixtures.py) as a plugin."""

import os
import pathlib
import subprocess
import sys

import pytest

from tests.wheels import install

ROOT = pathlib.Path(__file__).parents[2]
CASES = sorted(pathlib.Path(__file__).parent.glob("transformers_*cases.py"))


def built_wheel():
    """The newest wheel of the README's build, or a failure naming the command."""
    wheels = sorted(
        (ROOT / "dist").glob("ntops_prebuilt-*.whl"), key=lambda path: path.stat().st_mtime
    )
    if not wheels:
        pytest.fail(
            "no wheel in dist/: run `.venv/bin/ntops-aot build --arch sm_80 --ops all` first"
        )
    return wheels[-1]


def test_the_transformers_integration_on_the_cpu(tmp_path):
    try:
        import transformers  # noqa: F401
    except ImportError:
        pytest.fail("transformers is missing: `make install` installs it (pyproject's test extra)")
    site = install(built_wheel(), tmp_path / "site")
    path = os.pathsep.join(filter(None, (str(site), str(ROOT), os.environ.get("PYTHONPATH"))))
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("-p", "tests.unit.transformers_fixtures", *map(str, CASES)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-2000:]
