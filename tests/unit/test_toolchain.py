"""The toolchain object and the ninetoothed adapter: folders kept apart, the stand-in
driver set only while it is used, and any other ninetoothed than the pinned one refused."""

import pytest

from ntops_aot.aot.compile import codegen
from ntops_aot.aot.compile.cubins import compile_kernel
from ntops_aot.aot.declare.space import Variant
from ntops_aot.aot.errors import ToolchainError
from ntops_aot.aot.toolchain import ninetoothed_adapter, versions
from ntops_aot.aot.toolchain.compilers import Toolchain
from ntops_aot.aot.toolchain.targets import TARGETS

ADD = Variant("add", "sm_80", "fp16", 1, (("other", "tensor"),), widest=True)


def files(folder):
    return sorted(path for path in folder.rglob("*") if path.is_file())


def test_two_toolchains_in_one_process_keep_their_own_folders(registry, tmp_path):
    import triton

    first, second = Toolchain(tmp_path / "first"), Toolchain(tmp_path / "second")
    before = triton.knobs.cache.dir
    for toolchain in (first, second):
        with toolchain.target(TARGETS["sm_80"]) as driver:
            assert triton.knobs.cache.dir == str(toolchain.scratch / "triton")
            assert triton.runtime.driver.active is driver
        assert triton.knobs.cache.dir == before  # put back when the block ends
    op = registry["add"]
    keep = {"i32"}.__contains__
    (generated,) = codegen.generate(first, op, ADD, op.config(ADD), lambda spec: keep(spec.name))
    assert files(tmp_path / "first" / "ninetoothed")
    assert not files(tmp_path / "second")

    kernel = compile_kernel(second, generated)
    assert files(tmp_path / "second" / "triton")
    assert not files(tmp_path / "first" / "triton")
    # The folders never reach the cubin.
    assert compile_kernel(first, generated).cubin == kernel.cubin


def test_the_adapter_refuses_another_ninetoothed(monkeypatch, tmp_path):
    supported = versions.pinned("ninetoothed")
    assert supported == versions.installed("ninetoothed")
    real = versions.installed
    monkeypatch.setattr(
        versions, "installed", lambda name: "0.25.0" if name == "ninetoothed" else real(name)
    )
    with pytest.raises(ToolchainError) as raised:
        Toolchain(tmp_path).ninetoothed  # noqa: B018 - its first use checks the version
    said = str(raised.value)
    assert "ninetoothed 0.25.0 is installed" in said
    assert f"as of {supported} (pinned in its pyproject.toml)" in said
    assert f"-m pip install 'ninetoothed=={supported}'" in said
    assert raised.value.exit_code == 3  # a bad environment
    assert not tmp_path.exists() or not files(tmp_path)


def test_the_pin_is_read_from_the_installed_requirements():
    assert versions.pinned("triton") == versions.installed("triton")
    assert versions.pinned("click") is None  # click>=8.1: a floor, not a pin
    ninetoothed_adapter.check_version()


def test_each_toolchain_writes_ninetoothed_sources_in_a_folder_of_its_own(tmp_path):
    """Two toolchains on one scratch folder (two workers, two builds on one cache) never
    share the folder ninetoothed writes sources to and reads them back from; it goes
    with its toolchain."""
    import gc

    first, second = Toolchain(tmp_path), Toolchain(tmp_path)
    assert first.sources != second.sources
    assert first.sources.parent == second.sources.parent == tmp_path / "ninetoothed"
    folder = first.sources
    del first
    gc.collect()
    assert not folder.exists()
    assert second.sources.is_dir()
