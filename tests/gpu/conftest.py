"""GPU suite: runs where CUDA and an installed ntops_prebuilt wheel are; skipped elsewhere.

On the device machine: install a wheel built on a CPU machine into a folder, put it
on PYTHONPATH, then `pytest -m gpu tests`.
"""

import pathlib

import pytest
import torch

HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def nt():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return pytest.importorskip("ntops_prebuilt")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
