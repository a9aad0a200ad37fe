"""Seeded differential fuzzing of ntops_prebuilt against torch.

Each case calls one function of ntops_prebuilt.torch and its torch counterpart on
copies of the same random inputs and compares what they return and write. Case i of
seed s is drawn from (s, i) alone, on the CPU, so that a failure anywhere is
reproduced anywhere with the command printed beside it, e.g.

    python tests/gpu/fuzz.py --seed 7 --case 1234 -v

Covered: every function of ntops_prebuilt.torch (tests/gpu/fuzz_ops.py, kept one to
one with them by a unit test), the dtypes each is built for and others (which it must
refuse cleanly), 0 to 5 dims of sizes 0 to ~70 (now and then thousands), contiguous,
permuted, sliced (steps, offsets) and expanded layouts, broadcasting, Python numbers
and 0-dim tensors (on the CPU too), out= (fresh, an input itself, partly overlapping an
input, with elements sharing memory, of another dtype, shape or device), in-place forms,
negative-bit views (torch._neg_view, z.conj().imag), FakeTensors and __torch_dispatch__
subclasses, special values (nan, inf, -0.0, huge, tiny, subnormal), version counters,
KV caches in attention, and TF32 products.

Not covered: autograd (no input requires grad), CUDA graphs, streams, threads and other
devices, tensors or strides past 2^31 (tests/gpu/test_every_kernel.py has those),
speed, dropout's mask itself (random: only its form and rate are checked), attention
with dropout_p > 0 or with a row whose mask hides every key.

Outcomes per case: match; mismatch (values beyond per-dtype tolerances, dtype, shape,
the returned object or a version counter differ, or torch raised and ours returned);
both-raise; refused (ours raised a clean error naming the op on a call outside what the
wheel is built for); crash (the worker died, hung or hit a CUDA error: a fresh worker
goes on with the next case); error (ours raised anything else, or the harness failed).
Cases run in child processes, many per child; `--case` runs one in this process.
"""

import argparse
import collections
import dataclasses
import importlib
import json
import os
import pathlib
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: `tests.gpu` must be importable
    sys.path.insert(0, str(ROOT))

from tests.gpu.fuzz_check import (  # noqa: E402
    BOTH_RAISE,
    CRASH,
    FAILURES,
    OUTCOMES,
    REFUSED,
    Result,
    built_space,
    run_case,
)
from tests.gpu.fuzz_inputs import describe  # noqa: E402
from tests.gpu.fuzz_ops import SPECS, make_case, op_of  # noqa: E402

MODULE, DEVICE = "ntops_prebuilt", "cuda"
TIMEOUT = 60.0  # seconds a case may take (a cold one loads its kernels)
STARTUP = 300.0  # seconds a worker may take to import torch and the module, and init CUDA


class WorkerError(RuntimeError):
    """A worker could not start: no case ran, so none can be blamed."""


def load(name):
    """The module under test: "package.module", or "package.module:attribute" for a
    module-like object (the unit tests' shims)."""
    module, _, attribute = name.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


def prepare(device):
    if torch.device(device).type == "cuda":
        torch.zeros(1, device=device)  # CUDA is initialised before the first case
        # cuBLAS may reduce fp16 and bf16 products in half precision: take the reference
        # at its most accurate.
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


def serve(module, device, ops):
    """The worker: run the cases named on stdin (a JSON object a line) and answer each
    on stdout, until stdin closes or a case asks for a fresh process."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what the ops print goes to stderr, not into the answers
    tested = load(module)
    space = built_space(tested)
    prepare(device)
    answers.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        case = make_case(task["seed"], task["index"], ops)
        result = run_case(case, tested, device, space)
        answers.write(json.dumps(dataclasses.asdict(result)) + "\n")
        if result.restart:
            break
    return 0


class Worker:
    """A child process running cases one at a time (`serve`)."""

    def __init__(self, module, device, ops):
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (the worker's lifetime: see close)
        path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
        env = {**os.environ, "PYTHONPATH": path, "PYTHONFAULTHANDLER": "1"}
        command = [sys.executable, "-m", "tests.gpu.fuzz", "--worker", "--module", module]
        command += ["--device", device, "--ops", ",".join(ops)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            cwd=ROOT, env=env, text=True,
        )  # fmt: skip
        answer, why = self._answer(STARTUP)
        if answer is None:
            self.close(keep_log=True)
            raise WorkerError(f"the fuzz worker did not start ({why}):\n{self.tail()}")

    def run(self, seed, index, op, timeout):
        try:
            self.process.stdin.write(json.dumps({"seed": seed, "index": index}) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass
        answer, why = self._answer(timeout)
        if answer is not None:
            return Result(**answer)
        self.close(keep_log=True)
        detail = f"{why}; the worker's stderr ends:\n{self.tail()}"
        self.log.close()
        return Result(index, op, CRASH, detail, True)

    def _answer(self, timeout):
        """(the next answer, None) or (None, why there is none)."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            return None, f"no answer in {timeout:g} s"
        line = self.process.stdout.readline()
        if line:
            return json.loads(line), None
        code = self.process.wait()
        ended = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return None, f"the worker died ({ended})"

    def tail(self, size=3000):
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(self.log.tell() - size, 0))
        return self.log.read().decode(errors="replace").strip()

    def close(self, keep_log=False):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()
        if not keep_log:
            self.log.close()


@dataclasses.dataclass
class Summary:
    seed: int
    ops: tuple
    module: str
    device: str
    results: list
    seconds: float = 0.0

    @property
    def failures(self):
        return sorted((r for r in self.results if r.outcome in FAILURES), key=lambda r: r.index)

    def counts(self):
        found = collections.defaultdict(collections.Counter)
        for result in self.results:
            found[result.op][result.outcome] += 1
        return found

    def table(self):
        counts = self.counts()
        rows = [("op", *OUTCOMES)]
        rows += [(op, *(str(counts[op][o]) for o in OUTCOMES)) for op in sorted(counts)]
        totals = collections.Counter(r.outcome for r in self.results)
        rows.append(("all", *(str(totals[o]) for o in OUTCOMES)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
            for row in rows
        ]
        lines.append(f"{len(self.results)} cases in {self.seconds:.0f} s, seed {self.seed}")
        return "\n".join(lines)

    def messages(self, outcome):
        """How often each message came with `outcome`, per op."""
        found = collections.defaultdict(collections.Counter)
        for result in self.results:
            if result.outcome == outcome:
                found[result.op][re.sub(r"\d+", "N", result.detail)] += 1
        return {op: dict(counter.most_common()) for op, counter in sorted(found.items())}

    def command(self, index):
        return reproduce(self.seed, index, self.ops, self.module, self.device)

    def as_json(self):
        totals = collections.Counter(r.outcome for r in self.results)
        return {
            "seed": self.seed,
            "cases": len(self.results),
            "module": self.module,
            "device": self.device,
            "seconds": round(self.seconds, 1),
            "totals": {outcome: totals[outcome] for outcome in OUTCOMES},
            "ops": {op: dict(counter) for op, counter in sorted(self.counts().items())},
            # Both messages of every both-raise, and every refusal, with numbers as N
            "messages": {outcome: self.messages(outcome) for outcome in (BOTH_RAISE, REFUSED)},
            "failures": [
                {**dataclasses.asdict(r), "command": self.command(r.index)} for r in self.failures
            ],
        }


def reproduce(seed, index, ops, module=MODULE, device=DEVICE):
    """The command that runs case `index` alone and shows it."""
    words = ["python", "tests/gpu/fuzz.py", "--seed", str(seed), "--case", str(index), "-v"]
    if tuple(sorted(ops)) != tuple(sorted(SPECS)):
        words += ["--ops", ",".join(sorted(ops))]
    if (module, device) != (MODULE, DEVICE):
        words += ["--module", module, "--device", device]
    return " ".join(words)


def run(seed, indices, *, ops=None, module=MODULE, device=DEVICE, workers=1, timeout=TIMEOUT,
        report=None):  # fmt: skip
    """Run cases `indices` of `seed` in `workers` child processes, a fresh one after each
    crash; `report(summary, result)` sees each result as it comes."""
    ops = tuple(sorted(ops or SPECS))
    summary = Summary(seed, ops, module, device, [])
    tasks, lock, errors = iter(indices), threading.Lock(), []
    started = time.monotonic()

    def drive():
        worker = None
        try:
            while (index := _next(tasks, lock)) is not None:
                worker = worker or Worker(module, device, ops)
                result = worker.run(seed, index, op_of(index, ops), timeout)
                if result.restart:
                    worker.close()
                    worker = None
                with lock:
                    summary.results.append(result)
                    if report:
                        report(summary, result)
        except Exception as error:  # raised below, once every thread has stopped
            errors.append(error)
        finally:
            if worker:
                worker.close()

    threads = [threading.Thread(target=drive) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    summary.seconds = time.monotonic() - started
    if errors:
        raise errors[0]
    return summary


def _next(tasks, lock):
    with lock:
        return next(tasks, None)


def print_failure(summary, result):
    if result.outcome in FAILURES:
        detail = "\n    ".join(result.detail.splitlines()[:12])
        print(f"{result.outcome.upper()}: {result.op}, case {result.index}\n    {detail}")
        print(f"  reproduce: {summary.command(result.index)}", flush=True)


def run_one(seed, index, ops, module, device, verbose):
    """--case: the case in this process, described, with what differs."""
    tested = load(module)
    prepare(device)
    case = make_case(seed, index, ops)
    if verbose:
        print(describe(case))
    result = run_case(case, tested, device, built_space(tested))
    print(f"{result.outcome}: {case.op}, case {index}")
    if result.detail:
        print("  " + result.detail.replace("\n", "\n  "))
    return 1 if result.outcome in FAILURES else 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Outcomes: " + ", ".join(OUTCOMES)
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=1000, help="run cases 0 to N - 1")
    parser.add_argument("--start", type=int, default=0, help="with --count: the first case")
    parser.add_argument("--count", type=int, help="run cases START to START + COUNT - 1")
    parser.add_argument("--case", type=int, help="run this case alone, in this process")
    parser.add_argument("-v", "--verbose", action="store_true", help="with --case: show it")
    parser.add_argument("--ops", help="comma-separated op names (default: every op)")
    parser.add_argument("--json", type=pathlib.Path, help="write the summary there")
    parser.add_argument("--workers", type=int, default=1, help="child processes (default 1)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per case")
    parser.add_argument("--module", default=MODULE, help="the module under test")
    parser.add_argument("--device", default=DEVICE)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    ops = tuple(sorted(options.ops.split(","))) if options.ops else tuple(sorted(SPECS))
    unknown = sorted(set(ops) - set(SPECS))
    if unknown:
        parser.error(f"unknown ops {', '.join(unknown)}; ops: {', '.join(sorted(SPECS))}")
    if options.worker:
        return serve(options.module, options.device, ops)
    if options.case is not None:
        return run_one(options.seed, options.case, ops, options.module, options.device,
                       options.verbose)  # fmt: skip
    first, count = (options.start, options.count) if options.count else (0, options.cases)
    summary = run(
        options.seed, range(first, first + count), ops=ops, module=options.module,
        device=options.device, workers=options.workers, timeout=options.timeout,
        report=print_failure,
    )  # fmt: skip
    print(summary.table())
    if options.json:
        options.json.write_text(json.dumps(summary.as_json(), indent=1) + "\n")
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
