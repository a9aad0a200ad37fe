"""Module load time, and what compressing the cubins would add to it.

Loads every module the installed wheel has for this GPU (`preload`, cuModuleLoadData
per kernel) and reports the time per module; then times, on this machine's CPU, the
decompression each cubin would need if the wheel stored it zlib- or lzma-compressed,
and the sizes either would give. Prints a table and writes --json.

    PYTHONPATH=SITE python3 tests/benchmarks/bench_load.py --json load.json
"""

import argparse
import json
import lzma
import time
import zlib

import torch

import ntops_prebuilt as nt


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    torch.zeros(1, device="cuda")  # the primary context exists before we time
    major, minor = torch.cuda.get_device_capability()
    start = time.perf_counter()
    loaded = nt.preload()
    seconds = time.perf_counter() - start
    again = time.perf_counter()
    nt.preload()  # everything loaded: the cost of checking
    again = time.perf_counter() - again

    manifest = nt.manifest()
    arches = {v["id"]: v["arch"] for v in manifest["variants"]}
    usable = [
        index
        for index, kernel in enumerate(nt._C.kernels())
        if not kernel.endswith("+ptx") and arches[kernel.split("/")[0]] == f"sm_{major}{minor}"
    ]
    images = [nt._C.image(index) for index in usable]
    figures = {
        "device": torch.cuda.get_device_name(),
        "modules_loaded": loaded,
        "preload_s": seconds,
        "load_us_per_module": seconds / max(loaded, 1) * 1e6,
        "preload_again_s": again,
        "cubins": len(images),
        "cubin_mb": sum(map(len, images)) / 1e6,
    }
    for name, compress, decompress in (
        ("zlib", lambda data: zlib.compress(data, 9), zlib.decompress),
        ("lzma", lambda data: lzma.compress(data, preset=9), lzma.decompress),
    ):
        packed = [compress(image) for image in images]
        start = time.perf_counter()
        for data in packed:
            decompress(data)
        spent = time.perf_counter() - start
        figures[f"{name}_mb"] = sum(map(len, packed)) / 1e6
        figures[f"{name}_decompress_us_per_module"] = spent / max(len(packed), 1) * 1e6

    for key, value in figures.items():
        print(f"{key:<32} {value:.3f}" if isinstance(value, float) else f"{key:<32} {value}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(figures, file, indent=1)


if __name__ == "__main__":
    main()
