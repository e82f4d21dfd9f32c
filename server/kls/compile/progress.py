"""A terminal progress indicator for long compiles: elapsed seconds on a TTY, one line elsewhere."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType


class Spinner:
    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def start_nvcc(self) -> None:
        """Called when nvcc really starts (not on a cache hit)."""
        if not self.tty:
            print(f"{self.label}: running nvcc ...", file=sys.stderr, flush=True)
            return
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        frames = "|/-\\"
        i = 0
        while not self._stop.wait(0.2):
            elapsed = time.monotonic() - self._started
            sys.stderr.write(f"\r{self.label}: nvcc {frames[i % 4]} {elapsed:5.1f} s")
            sys.stderr.flush()
            i += 1

    def __enter__(self) -> Spinner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            sys.stderr.write("\r" + " " * (len(self.label) + 20) + "\r")
