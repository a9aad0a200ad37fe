"""`pytest tests` runs the CPU suite (the GPU suite skips itself without CUDA);
`pytest -m gpu tests` runs the GPU suite alone, on a machine that has the wheel but
not the toolchain, so the CPU suite is not even collected there."""

import pathlib

UNIT = pathlib.Path(__file__).parent / "unit"


def pytest_ignore_collect(collection_path, config):
    if config.getoption("markexpr") == "gpu":
        return collection_path == UNIT or UNIT in collection_path.parents
    return None
