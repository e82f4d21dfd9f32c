"""The parent side of the tuning worker: one request at a time, crashes and hangs recorded.

A worker that dies (a kernel took the process down) or stops answering (a hung kernel: its
process group is killed after the deadline) costs only the request in flight, which is
recorded as failed with the reason; the next request starts a fresh worker (setting the
shapes up again). Nothing here raises for a candidate's failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

WORKER = [sys.executable, "-m", "kls.tune.worker"]
SETUP_TIMEOUT_S = 600.0


class GpuUnavailable(Exception):
    """The worker could not start or set up (no GPU, no driver): nothing can be timed."""


class GpuSession:
    def __init__(
        self,
        setup: dict[str, Any],
        command: list[str] | None = None,
        timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.setup = setup
        self.command = command or WORKER
        self.timeout_s = timeout_s
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.device: dict[str, Any] = {}
        self.l2_flush_bytes = 0
        self.restarts = 0
        self.stderr_tail: list[str] = []
        self.drainer: threading.Thread | None = None
        self.cancelled = False
        self.finished = False

    def _start(self) -> None:
        self.lines = queue.Queue()
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a hung kernel is killed with its whole group
            env=self.env,
        )
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        self.drainer = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self.drainer.start()
        ready = self._send(self.setup, SETUP_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            reason = (ready or {}).get("error") or self._death()
            self.close()
            raise GpuUnavailable(f"the GPU worker could not start: {reason}")
        self.device = ready.get("device", {})
        self.l2_flush_bytes = int(ready.get("l2_flush_bytes", 0))

    def _read(self, proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        """Into this worker's own queue: a killed worker's end never reaches its successor."""
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.stderr_tail = (self.stderr_tail + [line.rstrip()])[-20:]

    def _send(self, value: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(value) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                self._kill()
                return {"ok": False, "stage": "hang", "fatal": True}
            if line is None:
                return None
            with contextlib.suppress(ValueError):
                answer = json.loads(line)
                if isinstance(answer, dict):
                    return answer

    def start(self) -> None:
        """Start the worker now (raises GpuUnavailable): find out early whether there is a
        GPU at all."""
        if self.cancelled:
            raise GpuUnavailable("cancelled")
        if self.proc is None:
            self._start()

    def cancel(self) -> None:
        """Stop now (from another thread): kill the worker's process group; the request in
        flight and every later one answer 'cancelled', and no worker starts again."""
        self.cancelled = True
        self._kill()

    def request(self, value: dict[str, Any]) -> dict[str, Any]:
        stopped = {"id": value.get("id"), "ok": False, "stage": "cancelled", "error": "cancelled"}
        if self.cancelled or self.finished:
            return stopped
        if self.proc is None:
            try:
                self._start()  # after a crash or a hang
            except GpuUnavailable as exc:
                return {"id": value.get("id"), "ok": False, "stage": "crash", "error": str(exc)}
            self.restarts += 1
        answer = self._send(value, self.timeout_s)
        if self.cancelled:
            self.close()
            return stopped
        if answer is None:  # the worker died
            reason = self._death()
            self.close()
            return {"id": value.get("id"), "ok": False, "stage": "crash", "error": reason}
        if answer.get("stage") == "hang":
            self.close()
            return {
                "id": value.get("id"),
                "ok": False,
                "stage": "hang",
                "error": f"no answer within {self.timeout_s:g} s (a hung kernel?); the worker "
                "was killed",
            }
        if answer.get("fatal"):
            self.close()
        return answer

    def _death(self) -> str:
        proc = self.proc
        if proc is None:
            return "no worker"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        code = proc.returncode
        if code is not None and self.drainer is not None:
            self.drainer.join(timeout=2)  # its last stderr lines, still in the pipe at exit
        if code is not None and code < 0:
            return f"the worker died with {signal.Signals(-code).name} (the kernel crashed it)"
        tail = self.stderr_tail[-1] if self.stderr_tail else "no output"
        return f"the worker exited with status {code}: {tail}"

    def _kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> None:
        """The session is over: stop the worker, and answer any later request 'cancelled'
        instead of starting a new one."""
        self.finished = True
        self.close()

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
