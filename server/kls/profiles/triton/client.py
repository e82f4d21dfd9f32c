"""The parent's side of the torch render worker: one persistent process, started on first
need, kept between renders, killed on a deadline, restarted after a crash.

The worker imports torch (seconds, about 1 GB): that start is not charged to any template.
Each render then has its own deadline (RENDER_SECONDS); a worker past it is killed and the
render becomes one finding. Which Python runs it: `KLS_TORCH_PYTHON`, else the interpreter
that runs kls. Renders are remembered by content (the request), so an unchanged instance is
not rendered twice in a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

START_SECONDS = 120.0  # importing torch and Inductor, once
RENDER_SECONDS = 60.0  # one render (Inductor's first one in a process compiles its helpers)
MEMORY_BYTES = 8 * 1024**3  # the worker's data segment (0.67 GB resident seen after mm)
_REMEMBERED = 64


class WorkerUnavailable(Exception):
    """No torch to render with, or not allowed to start it; the message says what to do."""


# Whether this process may run torch on templates. The CLI may (a person ran it); the language
# server may only once the client's settings say the workspace is trusted.
_ALLOWED: list[str | None] = [None]  # None: allowed; else why not


def allow_torch(allowed: bool, why: str = "") -> None:
    _ALLOWED[0] = None if allowed else why


# The Python the editor's settings name for the torch worker (kls.torchPython; a trusted
# workspace's only), before KLS_TORCH_PYTHON and the Python running kls.
_PYTHON: list[str | None] = [None]


def use_torch_python(python: str | None) -> None:
    """Run the torch worker with `python` (None: KLS_TORCH_PYTHON, else kls's own); a
    running worker of another Python is stopped, the next render starts the new one. The
    stop waits for a render in progress, so it runs on a thread of its own: the language
    server calls this on its event loop."""
    if python == _PYTHON[0]:
        return
    _PYTHON[0] = python
    if _SHARED is not None:
        threading.Thread(target=_SHARED.stop, name="kls-torch-stop", daemon=True).start()


def torch_python() -> str:
    return _PYTHON[0] or os.environ.get("KLS_TORCH_PYTHON") or sys.executable


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class TorchWorker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._unavailable: str | None = None
        self._remembered: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def render(self, request: dict[str, Any]) -> dict[str, Any]:
        """Inductor's answer to `request` (kls.profiles.triton.worker), or WorkerUnavailable."""
        key = json.dumps(request)  # in order: Inductor emits the config in the order it is given
        if _ALLOWED[0] is not None:
            raise WorkerUnavailable(_ALLOWED[0])
        with self._lock:
            found = self._remembered.get(key)
            if found is not None:
                self._remembered.move_to_end(key)
                return found
            proc = self._started()
            answer = self._ask(proc, key)
            if not _stopped_by_a_limit(answer):  # a loaded machine's may not recur
                self._remembered[key] = answer
            while len(self._remembered) > _REMEMBERED:
                self._remembered.popitem(last=False)
            return answer

    def stop(self) -> None:
        """Stop the worker and forget its answers and any failure to start (another Python
        may have torch)."""
        with self._lock:
            if self._proc is not None:
                self._kill(self._proc)
            self._proc = None
            self._unavailable = None
            self._remembered.clear()

    def _started(self) -> subprocess.Popen[str]:
        if self._unavailable is not None:
            raise WorkerUnavailable(self._unavailable)
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        server = str(Path(__file__).resolve().parents[3])  # the folder holding kls
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([server, os.environ.get("PYTHONPATH", "")])
        )
        proc = subprocess.Popen(
            [torch_python(), "-m", "kls.profiles.triton.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            preexec_fn=_limit,
            start_new_session=True,
        )
        ready = self._read(proc, START_SECONDS)
        if not ready.get("ready"):
            self._kill(proc)
            self._unavailable = (
                f"torch is not importable by {torch_python()} ({ready.get('message', 'no answer')})"
                ": Triton templates get their static checks only; install torch 2.11 there "
                "(pip install torch==2.11.0), or name a Python that has it: kls.torchPython in a "
                "trusted workspace, or KLS_TORCH_PYTHON"
            )
            raise WorkerUnavailable(self._unavailable)
        self._proc = proc
        return proc

    def _ask(self, proc: subprocess.Popen[str], line: str) -> dict[str, Any]:
        assert proc.stdin is not None
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except OSError:
            self._proc = None
            return {"error": {"kind": "crash", "message": "the torch worker died"}}
        answer = self._read(proc, RENDER_SECONDS)
        if "ready" in answer or not answer:
            self._kill(proc)
            self._proc = None
        return answer or {
            "error": {
                "kind": "limit",
                "message": f"Inductor's render took longer than {RENDER_SECONDS:g} s or ran "
                "out of memory, and was stopped",
            }
        }

    def _read(self, proc: subprocess.Popen[str], seconds: float) -> dict[str, Any]:
        """One JSON line from the worker within `seconds` ({} when none came)."""
        assert proc.stdout is not None
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(seconds)
        if reader.is_alive() or not box or not box[0]:
            self._kill(proc)
            return {}
        try:
            value = json.loads(box[0])
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.wait()


_SHARED: TorchWorker | None = None


def shared_worker() -> TorchWorker:
    global _SHARED
    if _SHARED is None:
        _SHARED = TorchWorker()
    return _SHARED


def _stopped_by_a_limit(answer: dict[str, Any]) -> bool:
    error = answer.get("error")
    return isinstance(error, dict) and error.get("kind") in ("limit", "TemplateTimeLimit")
