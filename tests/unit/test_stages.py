"""The build as three stages over data: plan (writes nothing) -> compile (the cache is
the store) -> package; a shard file is a serialised Compiled, and a merge is their
union packaged by the build's own package stage. Each fact (versions, zip writing)
comes from one place: changing it there changes every product."""

import dataclasses
import json
import zipfile

import pytest

from ntops_aot.aot import merge
from ntops_aot.aot.build import build
from ntops_aot.aot.compile.stage import compile_all
from ntops_aot.aot.config import BuildOptions
from ntops_aot.aot.errors import MergeError
from ntops_aot.aot.package import archive, shards
from ntops_aot.aot.package.stage import write_wheels
from ntops_aot.aot.plan.stage import plan
from ntops_aot.aot.toolchain import versions
from tests.unit.conftest import SMALL


def files(folder):
    return sorted(path for path in folder.rglob("*") if path.is_file())


def test_plan_writes_nothing_and_is_deterministic(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    options = BuildOptions(
        ops=("abs",), dtypes=("fp16",), ndims=(1,), build_dir=tmp_path / "gen", jobs=1
    )
    first = plan(options, environ={})
    assert first == plan(options, environ={})
    assert files(tmp_path) == []  # a cold cache: every kernel file imported, none stored
    assert first.learned

    compiled = compile_all(first)  # the compile stage stores what planning learnt
    assert compiled.compiled == 1
    again = plan(options, environ={})
    assert again.learned == {}
    assert again.keys == first.keys
    assert compile_all(again).compiled == 0  # the store answers
    assert compile_all(again).kernels == compiled.kernels


@pytest.fixture(scope="module")
def small(small_build, build_dir):
    """The small build's plan and compiled kernels (all in the store by now)."""
    options = dataclasses.replace(SMALL, build_dir=build_dir, jobs=2)
    planned = plan(options)
    return planned, compile_all(planned)


@pytest.fixture(scope="module")
def shard_files(small, tmp_path_factory):
    planned, _ = small
    out = tmp_path_factory.mktemp("shards")
    return [
        build(dataclasses.replace(planned.options, shard=(k, 2), out_dir=out)).wheel for k in (1, 2)
    ]


def test_a_merge_is_the_union_of_its_shards_packaged_as_one_build(
    small, small_build, shard_files, tmp_path
):
    planned, compiled = small
    assert compiled.compiled == 0
    parts = [shards.read(path) for path in shard_files]
    assert merge.union(planned, parts) == dataclasses.replace(compiled, compiled=0)
    result = merge.merge(shard_files, dataclasses.replace(planned.options, out_dir=tmp_path))
    assert result.wheel.read_bytes() == small_build.wheel.read_bytes()
    assert result.kernels == compiled.flat(planned.variants)


def test_a_merge_refuses_shards_of_another_toolchain(small, shard_files, monkeypatch):
    planned, _ = small
    real = versions.installed
    monkeypatch.setattr(
        versions, "installed", lambda name: "0.0.1" if name == "triton" else real(name)
    )
    with pytest.raises(MergeError, match=r"compiled with .*'triton': '3.9.0'.*'triton': '0.0.1'"):
        merge.merge(shard_files, planned.options)


def test_a_merge_refuses_a_variant_twice(small, shard_files, tmp_path):
    planned, _ = small
    first, second = (shards.read(path) for path in shard_files)
    stolen = dataclasses.replace(second, keys={**second.keys, **first.keys})
    with pytest.raises(MergeError, match="is in both"):
        merge.union(planned, [first, stolen])


def read(path):
    with zipfile.ZipFile(path) as zipped:
        return zipped.infolist(), {name: zipped.read(name) for name in zipped.namelist()}


def test_wheels_and_shards_are_written_by_the_same_zip_writer(small_build, shard_files):
    for path in [small_build.wheel, *shard_files]:
        infos, contents = read(path)
        assert path.read_bytes() == archive.zip_bytes(dict(reversed(contents.items())))
        assert [info.filename for info in infos] == sorted(contents)
        for info in infos:
            assert info.date_time == archive.EPOCH
            assert info.compress_type == zipfile.ZIP_DEFLATED
            mode = 0o755 if info.filename.endswith(".so") else 0o644
            assert info.external_attr >> 16 == mode


def test_every_product_takes_the_versions_from_one_reading(small, tmp_path, monkeypatch):
    planned, compiled = small
    fake = {"ntops-aot": "7.7.7", "triton": "9.9.9"}
    real = versions.installed
    monkeypatch.setattr(versions, "installed", lambda name: fake.get(name) or real(name))
    again = plan(planned.options)
    assert again.versions.triton == "9.9.9"
    assert set(again.keys.values()).isdisjoint(planned.keys.values())  # cache keys

    options = dataclasses.replace(planned.options, out_dir=tmp_path, build_dir=tmp_path)
    (wheel,) = write_wheels(dataclasses.replace(again, options=options), compiled)
    assert wheel.name.startswith("ntops_prebuilt-7.7.7-")
    _, contents = read(wheel)
    manifest = json.loads(contents["ntops_prebuilt/manifest.json"])
    assert manifest["toolchain"] == again.versions.as_dict()
    assert manifest["toolchain"]["triton"] == "9.9.9"
    assert b"Generator: ntops-aot 7.7.7\n" in contents["ntops_prebuilt-7.7.7.dist-info/WHEEL"]
    kernels = (tmp_path / "extension" / "all" / "kernels.c").read_text()
    assert kernels.startswith("/* Generated by ntops-aot 7.7.7 ")

    sharded = dataclasses.replace(again, options=dataclasses.replace(options, shard=(1, 1)))
    header = json.loads(read(shards.write(sharded, compiled))[1]["shard.json"])
    assert (header["ntops-aot"], header["toolchain"]["triton"]) == ("7.7.7", "9.9.9")
