"""The wheel's platform tag, read from what its extension needs, as auditwheel does.

A manylinux_X_Y wheel promises to load on every glibc X.Y and newer, so the tag is
the newest glibc symbol version the extension binds to (never the build host's
glibc), floored at manylinux2014's 2.17, and only if every library it links is one
the manylinux policies allow. The ELF is read here with `struct`: `.dynamic`'s
DT_NEEDED entries and `.gnu.version_r`'s version needs are all the policies look at.
x86_64 and aarch64, the machines Triton builds for, are both 64-bit little-endian:
the only kind of ELF read.
"""

from __future__ import annotations

import dataclasses
import re
import struct

from ..errors import ExtensionBuildError

# auditwheel's lib_whitelist for manylinux_2_17 and newer, less the C++, X11, GL and
# glib entries a C launcher never links; the dynamic loader itself is always allowed.
ALLOWED_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libdl.so.2",
        "libm.so.6",
        "libpthread.so.0",
        "libresolv.so.2",
        "librt.so.1",
        "libutil.so.1",
    }
)
LOADER = re.compile(r"ld-linux[\w.-]*\.so\.\d+")
OLDEST = (2, 17)  # manylinux2014: the oldest policy with aarch64 (2_5 and 2_12 are x86 only)
_GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?")
_MACHINES = {62: "x86_64", 183: "aarch64"}  # e_machine: EM_X86_64, EM_AARCH64
_SHT_DYNAMIC = 6
_SHT_GNU_VERNEED = 0x6FFFFFFE
_DT_NEEDED = 1


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a shared library asks of the system that loads it."""

    machine: str
    libraries: tuple[str, ...]  # DT_NEEDED, in order
    versions: tuple[tuple[str, str], ...]  # (library, symbol version) from .gnu.version_r


def read_needs(image: bytes) -> Needs:
    """The libraries and symbol versions a 64-bit little-endian ELF library needs."""
    if image[:6] != b"\x7fELF\x02\x01":
        raise ExtensionBuildError(
            "the extension is not a 64-bit little-endian ELF file: no manylinux tag to read"
        )
    (machine,) = struct.unpack_from("<H", image, 18)
    if machine not in _MACHINES:
        raise ExtensionBuildError(
            f"the extension is built for ELF machine {machine}: wheels are tagged for "
            f"{' and '.join(_MACHINES.values())} only"
        )
    sections = _sections(image)
    libraries, versions = [], []
    for kind, offset, size, link, count in sections:
        strings = sections[link][1]
        if kind == _SHT_DYNAMIC:
            libraries += _needed(image, offset, size, strings)
        elif kind == _SHT_GNU_VERNEED:
            versions += _version_needs(image, offset, count, strings)
    return Needs(_MACHINES[machine], tuple(libraries), tuple(versions))


def _sections(image: bytes) -> list[tuple[int, int, int, int, int]]:
    """Each section header's type, offset, size, linked section and info."""
    (table,) = struct.unpack_from("<Q", image, 40)  # e_shoff
    entry, count = struct.unpack_from("<HH", image, 58)  # e_shentsize, e_shnum
    headers = (struct.unpack_from("<IIQQQQII", image, table + i * entry) for i in range(count))
    return [(kind, offset, size, link, info) for _, kind, _, _, offset, size, link, info in headers]


def _needed(image: bytes, offset: int, size: int, strings: int) -> list[str]:
    entries = (struct.unpack_from("<qQ", image, at) for at in range(offset, offset + size, 16))
    return [_string(image, strings + value) for tag, value in entries if tag == _DT_NEEDED]


def _version_needs(image: bytes, offset: int, count: int, strings: int) -> list[tuple[str, str]]:
    """Verneed entries (one per library) each chain their Vernaux (one per version)."""
    needs = []
    for _ in range(count):
        _, versions, file, aux, next_entry = struct.unpack_from("<HHIII", image, offset)
        at = offset + aux
        for _ in range(versions):
            _, _, _, name, next_aux = struct.unpack_from("<IHHII", image, at)
            needs.append((_string(image, strings + file), _string(image, strings + name)))
            at += next_aux
        offset += next_entry
    return needs


def _string(image: bytes, start: int) -> str:
    return image[start : image.index(b"\0", start)].decode()


def glibc_version(name: str) -> tuple[int, int]:
    """(2, 34) for GLIBC_2.34; GLIBC_2.2.5 is (2, 2)."""
    match = _GLIBC.fullmatch(name)
    if match is None:
        raise ExtensionBuildError(f"the extension needs symbol version {name}: no manylinux has it")
    return int(match[1]), int(match[2])


def platform_tag(needs: Needs) -> str:
    """manylinux_X_Y_<machine> for the newest glibc `needs` asks for (2.17 at least);
    linux_<machine> for a library not linked against glibc (musl, ...)."""
    if "libc.so.6" not in needs.libraries:
        return f"linux_{needs.machine}"
    outside = [
        library
        for library in needs.libraries
        if library not in ALLOWED_LIBRARIES and not LOADER.fullmatch(library)
    ]
    if outside:
        raise ExtensionBuildError(
            f"the extension links {', '.join(outside)}, which a manylinux system need not "
            f"have (allowed: {', '.join(sorted(ALLOWED_LIBRARIES))}): load it with dlopen "
            "at run time, as driver.c does libcuda.so.1"
        )
    major, minor = max([OLDEST, *(glibc_version(name) for _, name in needs.versions)])
    return f"manylinux_{major}_{minor}_{needs.machine}"
