"""Upstream ntops's own test suite, run against the installed wheel through the
`ntops.torch` names (issue 32's contract: upstream's calls are the API).

Upstream's tests (InfiniTensor/ntops `tests/`, fetched, not copied here) import `ntops`
and call `ntops.torch.<name>`; this writes a package `ntops` that is the wheel under
those names (`ntops.torch`, `ntops.torch.<name>` modules for `from ntops.torch.mean
import mean`, `ntops.torch.utils`, and `ntops.kernels.scaled_dot_product_attention`'s
`CausalVariant`), runs pytest over the suite with it first on the path, and counts
passed, failed and skipped tests by upstream function, the functions the wheel lacks
included (their tests fail at the call).

    git -C MIRROR archive HEAD tests | tar -x -C DIR     # upstream's tests, into DIR/tests
    PYTHONPATH=.site python3 tests/upstream.py DIR [--json OUT] [-- PYTEST ARGS]
"""

import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

_INIT = '''"""ntops as upstream's tests import it: the ntops_prebuilt wheel."""
from . import kernels, torch
'''
# Each function from a module of its name, imported here first (as upstream's own
# __init__ does): a submodule imported later would bind its name to the module.
_TORCH = '''"""ntops.torch: the wheel's functions (ntops_prebuilt.torch)."""
from ntops_prebuilt.torch import __all__
from . import utils
'''
_UTILS = """from ntops_prebuilt.torch import (
    set_default_max_num_configs, set_default_num_stages, set_default_num_warps,
)
"""
_FUNCTION = "from ntops_prebuilt.torch import {name}\n"
_ATTENTION = "from ntops_prebuilt.torch import CausalVariant\n"


def write_shim(root: pathlib.Path, names: list[str]) -> pathlib.Path:
    """The package `ntops` under `root`, re-exporting the wheel's `names`."""
    package = root / "ntops"
    (package / "torch").mkdir(parents=True)
    (package / "kernels").mkdir()
    (package / "__init__.py").write_text(_INIT)
    imports = "".join(f"from .{name} import {name}\n" for name in names)
    (package / "torch" / "__init__.py").write_text(_TORCH + imports)
    (package / "torch" / "utils.py").write_text(_UTILS)
    for name in names:
        (package / "torch" / f"{name}.py").write_text(_FUNCTION.format(name=name))
    (package / "kernels" / "__init__.py").write_text("")
    (package / "kernels" / "scaled_dot_product_attention.py").write_text(_ATTENTION)
    return package


def counts(junit: pathlib.Path) -> dict[str, collections.Counter]:
    """Outcomes by upstream function (a test file `test_<name>.py` is the function's)."""
    found: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = next((part[5:] for part in module if part.startswith("test_")), "?")
        tags = {child.tag for child in case}
        outcome = (
            "failed"
            if tags & {"failure", "error"}
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
        found[name][outcome] += 1
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", type=pathlib.Path, help="the folder holding upstream's tests/")
    parser.add_argument("--json", type=pathlib.Path)
    # pytest's own arguments follow "--", split off here: Python 3.12's argparse
    # refused `upstream.py DIR -- -rf` with a nargs="*" positional.
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    arguments = parser.parse_args(argv[:cut])
    arguments.pytest = argv[cut + 1 :]
    import ntops_prebuilt.torch

    names = list(ntops_prebuilt.torch.__all__)
    with tempfile.TemporaryDirectory() as folder:
        shim = pathlib.Path(folder) / "shim"
        write_shim(shim, names)
        junit = pathlib.Path(folder) / "junit.xml"
        path = [str(shim), str(arguments.upstream.resolve()), *sys.path]
        command = [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={junit}", *arguments.pytest]  # fmt: skip
        environment = {"PYTHONPATH": ":".join(path)}
        done = subprocess.run(command, cwd=arguments.upstream, env={**os.environ, **environment})
        found = counts(junit) if junit.exists() else {}
    upstream = sorted(path.stem[5:] for path in (arguments.upstream / "tests").glob("test_*.py"))
    total = collections.Counter()
    print(f"{'function':28} {'passed':>7} {'failed':>7} {'skipped':>8}  in the wheel")
    for name in upstream:
        row = found.get(name, collections.Counter())
        total.update(row)
        print(
            f"{name:28} {row['passed']:7d} {row['failed']:7d} {row['skipped']:8d}  {name in names}"
        )
    print(
        f"{'all ' + str(len(upstream)):28} {total['passed']:7d} {total['failed']:7d} "
        f"{total['skipped']:8d}"
    )
    if arguments.json:
        rows = {name: dict(found.get(name, {})) for name in upstream}
        arguments.json.write_text(json.dumps({"functions": rows, "total": dict(total)}, indent=1))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
