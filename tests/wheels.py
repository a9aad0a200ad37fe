"""Installing a built wheel the way the deployment story does: into a folder of its
own, with no index and no dependencies (torch is already there)."""

import pathlib
import subprocess
import sys


def install(wheel: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*command, "--target", str(target), str(wheel)], check=True)
    return target
