"""Progress of a build on stderr: a bar with counts and ETA on a terminal, one line
per compiled or failed variant in logs (CI), so both show what is happening."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

from ..aot.compile.stage import Event


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar = self.stream.isatty()
        self.cached = self.failed = 0
        self.start = time.monotonic()
        self.drawn = False

    def __call__(self, event: Event) -> None:
        if event.cached:
            self.cached += 1
        if event.failure is not None:
            self.failed += 1
        if self.bar:
            self._draw(event)
        elif not event.cached:
            status = "FAILED" if event.failure else f"{event.seconds:.1f}s"
            self.stream.write(
                f"[{event.done}/{event.total}] {event.variant.id} {status}"
                f"{self._counts()} ETA {duration(event.estimate)}\n"
            )
        if self.bar and event.failure is not None:
            self._clear()
            self.stream.write(f"FAILED {event.variant.id} ({event.failure.kind})\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.bar and self.drawn:
            self._clear()
            self.stream.flush()

    def _counts(self) -> str:
        parts = [f"{self.cached} cached"] if self.cached else []
        parts += [f"{self.failed} failed"] if self.failed else []
        return f" ({', '.join(parts)})" if parts else ""

    def _draw(self, event: Event) -> None:
        width = shutil.get_terminal_size((80, 20)).columns
        text = (
            f" {event.done}/{event.total}{self._counts()} "
            f"{duration(time.monotonic() - self.start)} elapsed, ETA {duration(event.estimate)}"
        )
        cells = max(10, min(40, width - len(text) - 3))
        filled = cells * event.done // max(event.total, 1)
        line = f"[{'#' * filled}{'.' * (cells - filled)}]{text}"
        self.stream.write("\r" + line[: width - 1].ljust(width - 1))
        self.drawn = True

    def _clear(self) -> None:
        width = shutil.get_terminal_size((80, 20)).columns
        self.stream.write("\r" + " " * (width - 1) + "\r")
