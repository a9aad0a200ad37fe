"""Time a tuning wheel's candidates on this GPU and write the table `ntops-aot build`
compiles from: `python -m ntops_prebuilt.tune --out sm_90.json`.

A tuning wheel (`ntops-aot tune`) holds, for every variant of the ops that declare a
TUNING, each candidate configuration of each bucket. For every bucket, each
candidate runs the bucket's sample calls (shapes of real models, in their layouts),
is checked against torch, and is timed with CUDA events on the device alone (the
calls queued behind a GPU sleep), the inputs rotating among copies so that
memory-bound calls read from memory, not L2. The winner is the candidate nearest
each sample's best (`winner`). Nothing here needs more than torch and the wheel.
"""

import argparse
import ctypes
import datetime
import functools
import json
import math
import statistics
import sys
import time

import torch

import ntops_prebuilt

from . import _C, _ops
from ._errors import NotBuiltError

# Normwise relative error allowed against torch (fp32 inputs go through TF32 unless
# the variant is built for IEEE products).
TOLERANCE = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 5e-3}
ROTATION_BYTES = 256 * 2**20  # inputs cycled per timing: five times an H100's L2


class TuningRunError(RuntimeError):
    """The wheel or the GPU cannot give a tuning table."""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ntops_prebuilt.tune", description=__doc__)
    parser.add_argument("--out", required=True, help="the table to write (JSON)")
    parser.add_argument("--ops", help="only these ops (comma-separated)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per call")
    args = parser.parse_args(argv)
    try:
        table = tune(args.ops.split(",") if args.ops else None, args.repeats, log=print)
    except TuningRunError as error:
        print(f"ntops_prebuilt.tune: error: {error}", file=sys.stderr)
        return 2
    with open(args.out, "w") as file:
        json.dump(table, file, indent=1, sort_keys=True)
        file.write("\n")
    print(f"wrote {args.out}: {len(table['entries'])} variants")
    return 0


def tune(ops=None, repeats=5, log=print):
    """The table for this GPU: per variant and bucket, the winning configuration."""
    manifest = ntops_prebuilt.manifest()
    if not manifest["build"].get("candidates"):
        raise TuningRunError(
            "this wheel was built by `ntops-aot build`: it holds one configuration per "
            "bucket; build a tuning wheel with `ntops-aot tune --arch ...` and install it"
        )
    arch = _arch(manifest)
    started = datetime.datetime.now(datetime.timezone.utc)
    entries = {}
    for variant in manifest["variants"]:
        tuning = manifest["ops"][variant["op"]]["tuning"]
        if variant["arch"] != arch or (ops and variant["op"] not in ops) or tuning is None:
            continue
        entries[variant["id"]] = {
            bucket["name"]: _tune_bucket(variant, tuning, bucket, repeats, log)
            for bucket in tuning["buckets"]
            if len(variant["candidates"][bucket["name"]]) > 1
        }
    return {
        "format": 1,
        "arch": arch,
        "provenance": _provenance(manifest, started),
        "entries": {key: value for key, value in entries.items() if value},
    }


def _arch(manifest):
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    built = manifest["build"]["arches"]
    if arch not in built:
        raise TuningRunError(
            f"this GPU ({torch.cuda.get_device_name()}) is {arch}; the tuning wheel has "
            f"cubins for {', '.join(built)} only: build it with "
            f"`ntops-aot tune --arch {arch} --ops ...`"
        )
    return arch


def _tune_bucket(variant, tuning, bucket, repeats, log):
    dtype = getattr(torch, ntops_prebuilt.manifest()["dtypes"][variant["dtype"]])
    options = dict(tuning.get("options", {}))
    for name, value in variant["switches"].items():
        options.update(tuning.get("switch_options", {}).get(name, {}).get(value, {}))
    function = functools.partial(getattr(ntops_prebuilt, tuning["function"]), **options)
    reference = functools.partial(
        functools.reduce(getattr, tuning["reference"].split("."), torch), **options
    )
    candidates = variant["candidates"][bucket["name"]]
    times = [[] for _ in candidates]
    references = []
    for sample in bucket["samples"]:
        sets = _inputs(sample, dtype)
        calls = [_candidate_call(variant, bucket, i, function) for i in range(len(candidates))]
        for call in calls:
            _check(variant, call, reference, sets[0])
        # Candidates and torch take turns, repeat by repeat: a GPU whose clock drifts
        # during the run moves them all alike.
        found = _time_together([*calls, reference], sets, repeats)
        references.append(found[-1])
        for index, value in enumerate(found[:-1]):
            times[index].append(value)
    best = winner(times)
    log(
        f"{variant['id']} {bucket['name']}: candidate {best} of {len(candidates)} "
        f"({sum(times[best]):.1f} us over {len(references)} calls; "
        f"torch {sum(references):.1f} us)"
    )
    return {
        "config": candidates[best],
        "us": times[best],
        "candidates_us": times,
        "torch_us": references,
        "samples": bucket["samples"],
    }


def winner(times):
    """The candidate whose times are nearest the best of each sample call, by geometric
    mean: a configuration that is slow on one shape of a bucket loses even where it
    gains on the largest (least total time would let the largest call decide)."""
    best = [min(column) for column in zip(*times, strict=True)]

    def spread(index):
        ratios = [time / fastest for time, fastest in zip(times[index], best, strict=True)]
        return math.prod(ratios) ** (1 / len(ratios))

    return min(range(len(times)), key=spread)


def _candidate_call(variant, bucket, index, function):
    """`function` with only candidate `index` of the bucket allowed to run; checks that
    it did."""
    label = f"@{bucket['name']}#{index}"

    def call(*operands):
        previous = _C._candidate(index)
        try:
            result = function(*operands)
        except NotBuiltError as error:
            raise TuningRunError(
                f"{variant['id']} {bucket['name']}: a sample's layout has no kernel in this "
                f"tuning wheel ({error}); its TUNING.specs must name the samples' layouts"
            ) from error
        finally:
            _C._candidate(previous)
        ran = _C.last_kernel() or ""
        if not (ran.startswith(variant["id"] + "/") and ran.endswith(label)):
            raise TuningRunError(
                f"{variant['id']}: candidate {index} of {bucket['name']} did not run "
                f"({ran or 'nothing'} did: the samples must take this variant's kernels)"
            )
        return result

    return call


def _inputs(sample, dtype):
    """Copies of one call's operands, enough of them to take ROTATION_BYTES."""
    size = sum(math.prod(operand["shape"]) for operand in sample) * dtype.itemsize
    copies = max(1, min(32, ROTATION_BYTES // max(size, 1)))
    return [[_operand(operand, dtype) for operand in sample] for _ in range(copies)]


def _operand(operand, dtype):
    shape = list(operand["shape"])
    if not operand["transposed"]:
        return torch.randn(shape, device="cuda", dtype=dtype)
    shape[-2], shape[-1] = shape[-1], shape[-2]
    return torch.randn(shape, device="cuda", dtype=dtype).mT


def _is_ieee(variant):
    """A product of the IEEE fp32 precision (the second of kernels/_lib/products.py's PRECISION)."""
    precisions = _ops.SWITCHES.get(variant["op"], {}).get("fp32_precision")
    return bool(precisions) and variant["switches"].get("fp32_precision") == precisions[-1]


def _check(variant, function, reference, operands):
    ours, theirs = function(*operands), reference(*operands)
    error = (ours.float() - theirs.float()).norm() / theirs.float().norm().clamp_min(1e-30)
    tolerance = TOLERANCE[str(theirs.dtype).removeprefix("torch.")]
    if _is_ieee(variant):
        tolerance = 1e-5
    if not error <= tolerance:  # NaN fails too
        shapes = [list(operand.shape) for operand in operands]
        raise TuningRunError(
            f"{variant['id']}: {_C.last_kernel()} on {shapes}: relative error {error:.2e} "
            f"against torch exceeds {tolerance:.0e}"
        )


def _time_together(functions, sets, repeats):
    """Median device µs per call of each function over `repeats` rounds, each round
    running every function over every input set back to back, functions taking turns,
    timed by `gpu_us`: without the sleep a call's host overhead (torch's dispatch, our
    launch) shows up in the time of the kernels it issues, and moves the winner."""
    for function in functions:
        for operands in sets[:2]:
            function(*operands)
    samples = [[] for _ in functions]
    for _ in range(repeats):
        for function, found in zip(functions, samples, strict=True):

            def over_sets(function=function):
                for operands in sets:
                    function(*operands)

            found.append(gpu_us(over_sets, 1, wall_us(over_sets, 1)) / len(sets))
    return [round(statistics.median(found), 2) for found in samples]


@functools.cache
def cycles_per_us():
    """The rate of torch.cuda._sleep, measured once: it counts GPU clock cycles."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(10**7)
    end.record()
    end.synchronize()
    return 10**7 / (start.elapsed_time(end) * 1e3)


def wall_us(fn, calls):
    """Host µs per call of `calls` calls of `fn`, from an idle device until it is idle."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def gpu_us(fn, calls, host_us):
    """Device µs per call: CUDA events around `calls` back-to-back calls, queued behind a
    GPU sleep longer than the host takes to issue them (`host_us` per call, with a margin
    for a clock that varies): the device then runs them back to back, and the events
    time its work, not the host's. `make bench-layer` times by it too."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    torch.cuda.synchronize()
    torch.cuda._sleep(int((1.5 * host_us * calls + 100) * cycles_per_us()))
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def _provenance(manifest, started):
    toolchain = manifest["toolchain"]
    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": _driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "toolchain": {name: toolchain[name] for name in ("ninetoothed", "triton", "ntops-aot")},
        "date": started.isoformat(timespec="seconds"),
        "method": "CUDA events around calls queued behind a GPU sleep (device time, no "
        "host overhead); per sample, the candidates and torch take turns over repeats of "
        f"calls whose inputs rotate through {ROTATION_BYTES >> 20} MiB; median per call; "
        "winner: least geometric mean over the samples of its time over the sample's best",
    }


def _driver_version():
    """The NVIDIA driver's version (as nvidia-smi shows it) and the CUDA version it
    supports."""
    found = []
    try:
        with open("/proc/driver/nvidia/version") as file:
            words = file.readline().split()
        found.append(next(word for word in words if word[:1].isdigit() and "." in word))
    except (OSError, StopIteration):
        pass
    try:
        version = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        found.append(f"CUDA {version.value // 1000}.{version.value % 1000 // 10}")
    except (OSError, AttributeError):
        pass
    return ", ".join(found) or "unknown"


if __name__ == "__main__":
    sys.exit(main())
