"""The wheel is tagged by the glibc its extension needs, read from the extension's ELF,
and that is little: the manylinux_2_28 (RHEL 8) wheel of the issue, or older."""

import re
import shutil
import struct
import subprocess
import zipfile

import pytest

from ntops_aot.aot.errors import ExtensionBuildError
from ntops_aot.aot.package import manylinux

# The dl* calls' first versions, which driver.c binds to (GLIBC_2.34 is the default).
FIRST_VERSION = {"x86_64": "GLIBC_2.2.5", "aarch64": "GLIBC_2.17"}


def read(wheel, name):
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(name)


def test_the_wheel_is_tagged_by_what_its_extension_needs(small_build):
    needs = manylinux.read_needs(read(small_build.wheel, "ntops_prebuilt/_C.abi3.so"))
    tag = manylinux.platform_tag(needs)
    assert small_build.wheel.name.endswith(f"-cp310-abi3-{tag}.whl")
    text = read(small_build.wheel, "ntops_prebuilt-0.1.0.dist-info/WHEEL").decode()
    assert f"Tag: cp310-abi3-{tag}" in text.splitlines()
    # Installs on RHEL 8 (glibc 2.28), Ubuntu 20.04 (2.31) and newer, whatever the host.
    newest = max(manylinux.glibc_version(name) for _, name in needs.versions)
    assert newest <= (2, 28), needs.versions
    assert re.fullmatch(rf"manylinux_2_{max(newest[1], 17)}_(x86_64|aarch64)", tag)


def objdump(flag, library):
    return subprocess.run(
        ["objdump", flag, str(library)], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(shutil.which("objdump") is None, reason="binutils' objdump is not installed")
def test_the_reader_agrees_with_objdump(small_build, tmp_path):
    library = tmp_path / "_C.abi3.so"
    library.write_bytes(read(small_build.wheel, "ntops_prebuilt/_C.abi3.so"))
    needs = manylinux.read_needs(library.read_bytes())
    headers = objdump("-p", library)
    assert re.findall(r"NEEDED\s+(\S+)", headers) == list(needs.libraries)
    references = []
    for block in re.findall(r"required from (\S+):\n((?:\s+0x.*\n)+)", headers):
        references += [(block[0], line.split()[-1]) for line in block[1].splitlines()]
    assert sorted(references) == sorted(needs.versions)
    # Every version needed is some imported symbol's, and dlopen's and dlsym's is the
    # first: found in libc.so.6 from glibc 2.34, in libdl.so.2 (needed) before.
    imported = dict(
        reversed(line.split()[-2:])
        for line in objdump("-T", library).splitlines()
        if "*UND*" in line and "GLIBC_" in line
    )
    assert {version.strip("()") for version in imported.values()} == {v for _, v in needs.versions}
    first = f"({FIRST_VERSION[needs.machine]})"
    assert (imported["dlopen"], imported["dlsym"]) == (first, first)
    assert "libdl.so.2" in needs.libraries


def elf(libraries, versions, machine=62):
    """A 64-bit little-endian ELF with the sections the reader reads: .dynstr,
    .dynamic with `libraries` as DT_NEEDED, .gnu.version_r with `versions` by library."""
    strings = bytearray(b"\0")

    def string(text):
        strings.extend(text.encode() + b"\0")
        return len(strings) - len(text) - 1

    dynamic = b"".join(struct.pack("<qQ", 1, string(name)) for name in libraries)
    dynamic += struct.pack("<qQ", 0, 0)
    verneed = b""
    for index, (library, names) in enumerate(versions.items()):
        auxes = [
            struct.pack("<IHHII", 0, 0, 0, string(name), 16 if position < len(names) - 1 else 0)
            for position, name in enumerate(names)
        ]
        following = 16 + 16 * len(names) if index < len(versions) - 1 else 0
        verneed += struct.pack("<HHIII", 1, len(names), string(library), 16, following)
        verneed += b"".join(auxes)
    body = bytes(strings) + dynamic + verneed
    dynstr, dynamic_at, verneed_at = 64, 64 + len(strings), 64 + len(strings) + len(dynamic)
    sections = [
        (0, 0, 0, 0, 0),
        (3, dynstr, len(strings), 0, 0),  # SHT_STRTAB
        (6, dynamic_at, len(dynamic), 1, 0),
        (0x6FFFFFFE, verneed_at, len(verneed), 1, len(versions)),
    ]
    header = b"\x7fELF\x02\x01\x01" + bytes(9)
    header += struct.pack("<HHIQQQIHHHH", 3, machine, 1, 0, 0, 64 + len(body), 0, 64, 0, 0, 64)
    header += struct.pack("<HH", len(sections), 0)
    table = b"".join(
        struct.pack("<IIQQQQIIQQ", 0, kind, 0, 0, offset, size, link, info, 1, 0)
        for kind, offset, size, link, info in sections
    )
    return header + body + table


def test_the_reader_reads_needed_libraries_and_versions():
    image = elf(
        ["libm.so.6", "libc.so.6"],
        {"libm.so.6": ["GLIBC_2.29"], "libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.34"]},
        machine=183,
    )
    assert manylinux.read_needs(image) == manylinux.Needs(
        machine="aarch64",
        libraries=("libm.so.6", "libc.so.6"),
        versions=(
            ("libm.so.6", "GLIBC_2.29"),
            ("libc.so.6", "GLIBC_2.2.5"),
            ("libc.so.6", "GLIBC_2.34"),
        ),
    )


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (b"#!/bin/sh\n", "not a 64-bit little-endian ELF"),
        (b"\x7fELF\x01\x01" + bytes(58), "not a 64-bit little-endian ELF"),  # ELF32
        (elf(["libc.so.6"], {}, machine=20), "ELF machine 20"),  # PowerPC
    ],
)
def test_the_reader_refuses_what_it_cannot_tag(image, message):
    with pytest.raises(ExtensionBuildError, match=message):
        manylinux.read_needs(image)


def needs(libraries, *versions):
    return manylinux.Needs("x86_64", tuple(libraries), tuple(("libc.so.6", v) for v in versions))


@pytest.mark.parametrize(
    ("wanted", "tag"),
    [
        (needs(["libc.so.6"], "GLIBC_2.2.5", "GLIBC_2.34"), "manylinux_2_34_x86_64"),
        (needs(["libc.so.6", "libm.so.6"], "GLIBC_2.29"), "manylinux_2_29_x86_64"),
        # Older than manylinux2014 is tagged 2_17; the loader may be needed too.
        (needs(["libc.so.6", "ld-linux-x86-64.so.2"], "GLIBC_2.3.4"), "manylinux_2_17_x86_64"),
        (needs(["libc.musl-x86_64.so.1"]), "linux_x86_64"),  # not glibc: no promise
    ],
)
def test_the_tag_is_the_newest_glibc_needed(wanted, tag):
    assert manylinux.platform_tag(wanted) == tag


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        (needs(["libcuda.so.1", "libc.so.6"]), "links libcuda.so.1, which a manylinux system"),
        (needs(["libc.so.6"], "GLIBC_PRIVATE"), "symbol version GLIBC_PRIVATE"),
    ],
)
def test_no_manylinux_tag_for_what_the_policies_forbid(wanted, message):
    with pytest.raises(ExtensionBuildError, match=message):
        manylinux.platform_tag(wanted)
