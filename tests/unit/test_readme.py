"""CI runs what the README tells a new user to run, with the same defaults."""

import pathlib
import re

ROOT = pathlib.Path(__file__).parents[2]


def commands(lines):
    """Shell lines with comments, blanks and shell settings dropped."""
    kept = (re.sub(r"\s+#.*$", "", line).strip() for line in lines)
    return [line for line in kept if line and not line.startswith(("#", "set ", "cd "))]


def fresh_machine_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## On a fresh machine", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    return commands(block.group(1).splitlines())


def test_ci_runs_the_readme_commands_in_order():
    readme = fresh_machine_commands()
    assert readme[0] == "make install", readme
    assert any(line.startswith(".venv/bin/ntops-aot build") for line in readme), readme
    assert readme[-1] == "make test", readme
    ci = commands((ROOT / ".ci" / "run").read_text().splitlines()[1:])
    positions = [ci.index(line) for line in readme]  # ValueError: CI skips a README command
    assert positions == sorted(positions), (readme, ci)


def test_ci_changes_no_default():
    ci = (ROOT / ".ci" / "run").read_text()
    assert not re.search(r"\b(TORCH|PYTHON|VENV|ARCH|OPS)=", ci), ci
