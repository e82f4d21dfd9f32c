"""Render in worker processes that kls can kill: a deadline, a memory limit, a fresh replacement.

The in-process bounds of `kls.render` (time checked at helper calls and output writes, output
size) cannot stop a template that loops without writing or builds a huge value in one step. So
every render that executes template code runs here, in a process of its own
(`kls.sandbox.child`):

- a wall-clock deadline inside the worker (SIGALRM raises where the template is, so the KT104
  finding names its line), and a hard one outside it: past `seconds + grace` the parent kills
  the process and answers KT104 itself;
- an address-space limit (`RLIMIT_AS`): a memory bomb fails with MemoryError (KT104) in the
  worker, never in the editor; a worker that hit a limit is replaced, not reused;
- an elastic pool: idle workers are reused (their compiled-template and op caches stay warm);
  when all are busy a new one starts (~0.2 s), up to a cap, so a few pathological documents
  never hold up the others; after a render, a spare is started while fewer than `keep`
  exist, so two overlapping renders do not wait for a start.

The worker also parses the rendered text with tree-sitter (KT501) after each render, under the
same memory limit and a deadline of its own (`kls.cuda_syntax.PARSE_SECONDS`, plus `grace`
before the parent kills it); the CUTLASS op list is generated before the render's deadline
starts (the message protocol is in kls.sandbox.child). Nothing parses rendered text in the
calling process.

The language server sends its interactive render with `start` (from the checking thread,
which then parses the template while the worker renders) and takes the answer later.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import cast

from kls.cuda_syntax import PARSE_SECONDS, ParseOutcome, stopped_by_time
from kls.findings import Severity
from kls.instances.schema import InstanceSpec
from kls.profiles import profile
from kls.render import Limits, RenderResult
from kls.runtime.record import RuntimeFinding, Site
from kls.sandbox.child import failed, time_message

GRACE_S = 1.0  # after the render's deadline, before the parent kills the worker
DEFAULT_MEMORY_MB = 1024  # per worker; a shipped CUTLASS render peaks at ~60 MB
DEFAULT_SECONDS = 5.0  # a shipped render takes 2-25 ms warm, ~0.2 s in a fresh worker
# What the CLI flags `--render-timeout` and `--render-memory` accept: a worker needs ~60 MB to
# start; more than a few minutes or 16 GB is no longer a bound.
RENDER_SECONDS_RANGE = (0.5, 300.0)
RENDER_MEMORY_MB_RANGE = (256, 16384)
# What the editor's settings `kls.renderTimeout` and `kls.renderMemoryMB` accept: a value from
# an editor may come from a workspace's own settings, which must not lift the sandbox's bounds
# far (with 300 s and 16 GB a template ran to 6 GB); a value outside is the default.
EDITOR_SECONDS_RANGE = (0.5, 10.0)
EDITOR_MEMORY_MB_RANGE = (256, 2048)
# A render still running after this long is deprioritised (the shipped ones take 2-25 ms).
SLOW_RENDER_S = 0.25
SLOW_NICENESS = 15
# The longest a worker may take to generate an instance's CUTLASS op list before its render
# (kls's own work, outside the template's deadline; level "2222" takes ~22 s cold on 2 cores).
OP_LIST_SECONDS = 300.0


@dataclass(frozen=True)
class WorkerLimits:
    memory_mb: int = DEFAULT_MEMORY_MB
    seconds: float = DEFAULT_SECONDS  # a render's deadline, unless the caller gives Limits
    grace_s: float = GRACE_S


RenderRequest = tuple[str, InstanceSpec, dict[Path, str], Limits]


class _Worker:
    """One `python -m kls.sandbox.child` process and its two pipes."""

    def __init__(self, memory_mb: int) -> None:
        self.memory_mb = memory_mb
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kls.sandbox.child", str(memory_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal is the parent's alone
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.answers = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.process.stdin.close()
        self.process.stdout.close()
        self.niced = False

    def yield_cpu(self) -> None:
        """Lower this worker's CPU priority (for good: it is not reused afterwards)."""
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, self.process.pid, SLOW_NICENESS)
            self.niced = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(Exception):
            self.process.wait(timeout=1)
        for conn in (self.requests, self.answers):
            with contextlib.suppress(OSError):
                conn.close()


class PendingRender:
    """A render sent to a worker (`RenderWorkers.start`); `result()` waits for its answer."""

    def __init__(
        self, pool: RenderWorkers, worker: _Worker, instance: InstanceSpec, limits: Limits
    ) -> None:
        self.pool = pool
        self.worker = worker
        self.instance = instance
        self.limits = limits
        self.sent = time.monotonic()
        self.broken = False
        self._result: RenderResult | None = None
        self._lock = threading.Lock()

    def result(self) -> RenderResult:
        with self._lock:
            if self._result is None:
                spent = True
                try:
                    self._result, spent = self._answer()
                finally:
                    self.pool._release(self.worker, reuse=not spent)
            return self._result

    def abandon(self) -> None:
        """Nobody wants the answer: take it in the background and give the worker back."""
        if self._result is None:
            threading.Thread(target=self.result, daemon=True).start()

    def _answer(self) -> tuple[RenderResult, bool]:
        worker, limits = self.worker, self.limits
        if self.broken:
            return failed(self.instance, self.pool._death_message(worker)), True
        try:
            # 1. The op list (trusted, outside the render's deadline).
            if not worker.answers.poll(OP_LIST_SECONDS):
                return self._op_list_too_slow(), True
            worker.answers.recv()
            started = time.monotonic()
            # 2. The render, within its deadline.
            answered = worker.answers.poll(SLOW_RENDER_S)
            if not answered:
                worker.yield_cpu()  # a slow render must not slow the interactive ones
                waited = time.monotonic() - started
                total = limits.seconds + self.pool.limits.grace_s
                answered = worker.answers.poll(max(total - waited, 0))
            if not answered:
                spent_s = time.monotonic() - started
                return failed(self.instance, f"{time_message(limits)} ({spent_s:.1f} s)"), True
            _, result, spent = worker.answers.recv()
        except (EOFError, OSError, pickle.UnpicklingError):
            return failed(self.instance, self.pool._death_message(worker)), True
        if spent or result.text is None:
            return result, spent or worker.niced
        # 3. The parse of the rendered text, within its own deadline.
        result.syntax, spent = self.pool._parse_answer(worker)
        return result, spent or worker.niced

    def _op_list_too_slow(self) -> RenderResult:
        instance = self.instance
        message = (
            f"generating the CUTLASS op list took longer than {OP_LIST_SECONDS:g} s and was "
            f"stopped; choose a lower cutlass_instantiation_level (it is "
            f"'{instance.instantiation_level}')"
        )
        site = Site(str(instance.config_path), instance.op_line)
        finding = RuntimeFinding("KT005", Severity.ERROR, message, site)
        return RenderResult(instance, None, None, [], [finding])


def default_max_workers() -> int:
    return max(8, min(16, 4 * (os.cpu_count() or 1)))


class RenderWorkers:
    """A thread-safe, elastic pool of render worker processes."""

    def __init__(
        self,
        keep: int | None = None,
        max_workers: int | None = None,
        limits: WorkerLimits | None = None,
    ) -> None:
        self.keep = keep or max(2, os.cpu_count() or 1)
        self.max_workers = max(max_workers or default_max_workers(), self.keep)
        self.limits = limits or WorkerLimits()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._starting = False  # a spare worker is being started

    def render(
        self,
        instance: InstanceSpec,
        overrides: dict[Path, str] | None = None,
        limits: Limits | None = None,
    ) -> RenderResult:
        """Render in a worker; a render that breaks a limit ends as a KT104 finding."""
        return self.start(instance, overrides, limits).result()

    def start(
        self,
        instance: InstanceSpec,
        overrides: dict[Path, str] | None = None,
        limits: Limits | None = None,
    ) -> PendingRender:
        """Send a render to a worker now, from this thread, and return at once: the caller
        does other work meanwhile and then takes `result()` (no thread hop: a pool thread
        waits for the GIL that a busy caller holds). Every started render must be ended by
        `result()` or `abandon()`, which give its worker back."""
        limits = limits or Limits(seconds=self.limits.seconds)
        request: RenderRequest = ("render", instance, dict(overrides or {}), limits)
        worker = self._acquire()
        pending = PendingRender(self, worker, instance, limits)
        try:
            worker.requests.send(request)
        except (OSError, pickle.PicklingError):
            pending.broken = True
        except BaseException:
            self._release(worker, reuse=False)
            raise
        return pending

    def parse(self, text: str) -> ParseOutcome:
        """tree-sitter's parse of `text` (a render made elsewhere) in a worker, bounded as a
        worker's parse after its render is."""
        worker = self._acquire()
        spent = True
        try:
            try:
                worker.requests.send(("parse", text))
            except (OSError, pickle.PicklingError):
                return ParseOutcome(stopped=self._parse_death(worker))
            outcome, spent = self._parse_answer(worker)
            return outcome
        finally:
            self._release(worker, reuse=not spent)

    def _parse_answer(self, worker: _Worker) -> tuple[ParseOutcome, bool]:
        """The worker's ("parse", outcome, spent) answer, or why it did not come: past the
        parse's deadline and grace the worker is killed."""
        try:
            if not worker.answers.poll(PARSE_SECONDS + self.limits.grace_s):
                return stopped_by_time(PARSE_SECONDS), True
            _, outcome, spent = worker.answers.recv()
            return outcome, spent
        except (EOFError, OSError, pickle.UnpicklingError):
            return ParseOutcome(stopped=self._parse_death(worker)), True

    def _parse_death(self, worker: _Worker) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=1)
        code = worker.process.returncode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return (
            f"tree-sitter's process died ({how}): it needed more than "
            f"{self.limits.memory_mb} MB or crashed"
        )

    def _death_message(self, worker: _Worker) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=1)
        code = worker.process.returncode
        if code is not None and code > 0:  # a Python error in kls itself, not a limit
            return (
                f"the render process stopped with an error (exit code {code}): a broken kls "
                "install or a kls bug, not the template (`python -m kls.sandbox.child` must "
                "import: reinstall kls and its dependencies in this interpreter)"
            )
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return (
            f"the render process died ({how}); a template that needs more than "
            f"{self.limits.memory_mb} MB or crashes the renderer is stopped here"
        )

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("kls render workers are closed")
                if self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        break
                    worker.kill()
                    continue
                if len(self._busy) < self.max_workers:
                    worker = _Worker(self.limits.memory_mb)
                    break
                self._cond.wait()
            self._busy.add(worker)
            return worker

    def _start_spare(self) -> None:
        worker: _Worker | None = None
        with contextlib.suppress(Exception):  # else the next render starts one itself
            worker = _Worker(self.limits.memory_mb)
        with self._cond:
            self._starting = False
            if (
                worker is not None
                and not self._closed
                and len(self._idle) < self.keep
                and worker.memory_mb == self.limits.memory_mb  # not started before set_limits
            ):
                self._idle.insert(0, worker)  # behind the warm ones: renders pop from the end
                worker = None
                self._cond.notify()
        if worker is not None:
            worker.kill()

    def _release(self, worker: _Worker, reuse: bool, spare: bool = True) -> None:
        """Take `worker` back (to reuse) or kill it; with `spare`, also start a worker when
        fewer than `keep` exist, so that a render that overlaps another (a background check,
        a preamble's render) finds one started instead of waiting ~0.2 s for a new one."""
        with self._cond:
            self._busy.discard(worker)
            if reuse and not self._closed and len(self._idle) < self.keep:
                self._idle.append(worker)
                worker = None  # type: ignore[assignment]
            self._cond.notify()
            spare = (
                spare
                and not self._closed
                and not self._starting
                and len(self._idle) + len(self._busy) < self.keep
            )
            if spare:
                self._starting = True
        if worker is not None:
            worker.kill()
        if spare:
            threading.Thread(target=self._start_spare, name="kls-spare-worker", daemon=True).start()

    def warm(self) -> None:
        """Start one worker now, so the first check does not wait (a spare follows the first
        render: starting it now would slow the server's own start)."""
        self._release(self._acquire(), True, spare=False)

    def set_limits(self, limits: WorkerLimits) -> None:
        """New limits for workers started from now on; idle workers (started with the old
        ones) are stopped, busy ones finish their render."""
        if limits == self.limits:
            return
        with self._cond:
            self.limits = limits
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers = [*self._idle, *self._busy]
            self._idle.clear()
            self._cond.notify_all()
        for worker in workers:
            worker.kill()

    @property
    def size(self) -> int:
        with self._cond:
            return len(self._idle) + len(self._busy)


_SHARED: RenderWorkers | None = None
_SHARED_LOCK = threading.Lock()


def shared_workers() -> RenderWorkers:
    """The process-wide pool (created on first use, closed at exit)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = RenderWorkers()
            atexit.register(_SHARED.close)
        return _SHARED


def close_shared_workers() -> None:
    """Kill the render workers now (server exit): threads waiting on them return at once."""
    with _SHARED_LOCK:
        pool = _SHARED
    if pool is not None:
        pool.close()


def configure(limits: WorkerLimits) -> None:
    """Apply new worker limits (a settings change): later workers start with them."""
    shared_workers().set_limits(limits)


def start_isolated(
    instance: InstanceSpec,
    overrides: dict[Path, str] | None = None,
    limits: Limits | None = None,
) -> PendingRender:
    """`render_isolated`, sent now and answered by the result's `result()` (see
    `RenderWorkers.start`)."""
    return shared_workers().start(instance, overrides, limits)


def parse_isolated(text: str) -> ParseOutcome:
    """tree-sitter's parse of rendered text, in a render worker (never in this process)."""
    return shared_workers().parse(text)


def render_isolated(
    instance: InstanceSpec,
    overrides: dict[Path, str] | None = None,
    limits: Limits | None = None,
) -> RenderResult:
    """`kls.render.render`, run in a killable worker process under the sandbox's limits (or
    the instance's profile's own render, e.g. Inductor's in a torch worker)."""
    seconds = limits.seconds if limits is not None else shared_workers().limits.seconds
    elsewhere = profile(instance.profile).render_elsewhere(instance, overrides or {}, seconds)
    if elsewhere is not None:
        return cast(RenderResult, elsewhere)
    return shared_workers().render(instance, overrides, limits)
