"""Worker processes with a time limit and a memory bound per task.

A pool of `jobs` long-lived processes (spawned clean, each with its own state, which
`start` makes when the worker starts: the build's is a Toolchain) takes tasks one at
a time. The parent watches each: a task that
runs past `timeout` seconds, or whose worker (with the ptxas it runs) grows past
`memory` bytes of resident memory, is killed with its whole process group and
reported as a `Failure`; so is a worker that dies (a crash in LLVM, the OOM killer).
A fresh worker replaces it and the other tasks go on.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import pathlib
import signal
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import BuildError

_POLL = 0.25  # seconds between checks of the running tasks' time and memory


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a task produced nothing: "error", "timeout", "memory" or "crash"."""

    kind: str
    message: str


Work = Callable[[Any], Any]
Start = Callable[[], Work]  # run once in each worker: the work it then does per task
Report = Callable[[Any, "Any | Failure", float], None]


@dataclasses.dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    connection: multiprocessing.connection.Connection
    task: Any = None
    started: float = 0.0


def run(
    tasks: Iterable[Any],
    start: Start,
    jobs: int,
    timeout: float | None,
    memory: int | None,
    report: Report,
) -> None:
    """Run `work(task)` for every task on `jobs` workers, each with the `work` that
    `start()` made in it (`start` is pickled: a module-level function or a partial of
    one); `report(task, result or Failure, seconds)` as each ends, in the parent, in
    order of completion."""
    pending = list(tasks)[::-1]
    context = multiprocessing.get_context("spawn")
    idle: list[_Worker] = []
    busy: list[_Worker] = []
    try:
        while pending or busy:
            while pending and len(busy) < jobs:
                worker = idle.pop() if idle else _spawn(context, start)
                worker.task, worker.started = pending.pop(), time.monotonic()
                worker.connection.send(worker.task)
                busy.append(worker)
            ready = multiprocessing.connection.wait([w.connection for w in busy], _POLL)
            for worker in list(busy):
                outcome = _outcome(worker, ready, timeout, memory)
                if outcome is None:
                    continue
                busy.remove(worker)
                result, healthy = outcome
                if healthy:
                    idle.append(worker)
                else:
                    _kill(worker)
                report(worker.task, result, time.monotonic() - worker.started)
    finally:
        for worker in idle:
            worker.connection.send(None)
        for worker in busy:
            _kill(worker)
        for worker in idle:
            worker.process.join(5)
            if worker.process.is_alive():
                _kill(worker)


def _outcome(
    worker: _Worker, ready: list[Any], timeout: float | None, memory: int | None
) -> tuple[Any, bool] | None:
    """(result or Failure, whether the worker can take another task), or None while
    the task is still running within its limits."""
    if worker.connection in ready:
        try:
            status, value = worker.connection.recv()
        except (EOFError, OSError):
            worker.process.join(1)
            return Failure("crash", f"the worker died (exit code {worker.process.exitcode})"), False
        return (value if status == "ok" else Failure("error", value)), True
    if timeout is not None and time.monotonic() - worker.started > timeout:
        return Failure("timeout", f"still compiling after {timeout:g} s (--timeout)"), False
    if memory is not None:
        used = _resident_bytes(worker.process.pid)
        if used > memory:
            return (
                Failure(
                    "memory",
                    f"used {used / 2**20:.0f} MiB, over the {memory / 2**20:.0f} MiB "
                    "allowed (--max-memory)",
                ),
                False,
            )
    return None


def _spawn(context: Any, start: Start) -> _Worker:
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(child, start), daemon=True)
    process.start()
    child.close()
    return _Worker(process, parent)


def _serve(connection: multiprocessing.connection.Connection, start: Start) -> None:
    """A worker's loop. Its own process group, so that killing it kills its ptxas too;
    the parent handles Ctrl-C for all."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    work = _started(start)
    while True:
        try:
            task = connection.recv()
        except EOFError:  # the parent is gone
            return
        if task is None:
            return
        try:
            reply = ("ok", work(task))
        except BuildError as error:
            reply = ("error", str(error))
        except Exception:
            reply = ("error", traceback.format_exc(limit=-6))
        try:
            connection.send(reply)
        except (BrokenPipeError, OSError):
            return


def _started(start: Start) -> Work:
    """`start()`'s work; if it failed, work that reports why for every task."""
    try:
        return start()
    except Exception as error:
        failed = error

        def fail(task: Any) -> Any:
            raise failed

        return fail


def _kill(worker: _Worker) -> None:
    pid = worker.process.pid
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            worker.process.kill()
    worker.process.join(5)
    worker.connection.close()


def _resident_bytes(pid: int | None) -> int:
    """Resident memory of `pid` and its descendants (Linux /proc; 0 elsewhere)."""
    total, pending = 0, [pid] if pid else []
    while pending:
        current = pending.pop()
        proc = pathlib.Path(f"/proc/{current}")
        try:
            status = (proc / "status").read_text()
            total += next(
                int(line.split()[1]) * 1024
                for line in status.splitlines()
                if line.startswith("VmRSS:")
            )
            for task in (proc / "task").iterdir():
                pending.extend(int(child) for child in (task / "children").read_text().split())
        except (OSError, StopIteration, ValueError):
            continue
    return total
