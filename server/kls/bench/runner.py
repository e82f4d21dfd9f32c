"""Spawn the worker (never fork the server), feed it the job, bound its time, read its result."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from kls.bench.job import BenchJob

WORKER = [sys.executable, "-m", "kls.bench.worker"]


@dataclass
class WorkerOutcome:
    ok: bool
    result: dict[str, Any]
    message: str = ""  # what went wrong, in words, when not ok
    stderr: str = ""


class WorkerCancelled(Exception):
    pass


def run_worker(
    job: BenchJob,
    timeout_s: float = 300.0,
    command: list[str] | None = None,
    cancel: threading.Event | None = None,
    env: dict[str, str] | None = None,
) -> WorkerOutcome:
    proc = subprocess.Popen(
        command or WORKER,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a hung kernel is killed with its whole process group
        env=env,
    )
    out: list[str] = []
    err: list[str] = []
    io = threading.Thread(target=_communicate, args=(proc, json.dumps(job.to_json()), out, err))
    io.start()
    deadline = time.monotonic() + timeout_s
    while io.is_alive():
        io.join(0.05)
        if cancel is not None and cancel.is_set():
            _kill(proc)
            io.join()
            raise WorkerCancelled()
        if time.monotonic() > deadline:
            _kill(proc)
            io.join()
            return WorkerOutcome(
                False,
                {},
                f"the benchmark ran past {timeout_s:g} s and was stopped (a hung "
                "kernel?); the server is unaffected",
                "".join(err),
            )
    stdout, stderr = "".join(out), "".join(err)
    result = _last_json(stdout)
    if proc.returncode != 0 or result is None:
        return WorkerOutcome(False, result or {}, _death(proc.returncode, stderr), stderr)
    return outcome_of(result, stderr)


def outcome_of(result: dict[str, Any], stderr: str = "") -> WorkerOutcome:
    """A worker's result as an outcome: a failure in words, its stage first."""
    if not result.get("ok"):
        stage = result.get("stage", "?")
        return WorkerOutcome(False, result, f"{stage}: {result.get('error', 'failed')}", stderr)
    return WorkerOutcome(True, result, "", stderr)


def _communicate(proc: subprocess.Popen[str], data: str, out: list[str], err: list[str]) -> None:
    try:
        o, e = proc.communicate(data)
    except (BrokenPipeError, ValueError, OSError):
        o, e = "", ""
    out.append(o or "")
    err.append(e or "")


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return None


def _death(returncode: int | None, stderr: str) -> str:
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        return (
            f"the benchmark worker died with {name} (the kernel or the library crashed the "
            "process); the server is unaffected"
        )
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
    return f"the benchmark worker exited with status {returncode}: {tail}"
