"""Where candidate builds run: a local pool or a Ray cluster, behind one interface.

A build task is plain data (the instance with its op and variables set, the template texts,
the compile options) and `build_task` is a plain function of it: it calls
`kls.compile.compile_instance`, so every build goes through the compile cache of the machine
that runs it (a re-run, or a run after a crash, finds what was built and starts no nvcc), and
it never raises: a failed or crashed build is an outcome like any other.

- `LocalExecutor`: N builds at once on this machine, each nvcc in its own process group
  (kls's compile runner); N from the cores and the free memory (`local_slots`).
- `RayExecutor`: each build a Ray task declaring its CPUs and memory, so Ray places it on a
  node with room; `ray.init()` starts a local cluster when no address is given. The library
  comes back as bytes, so builder nodes need no shared file system with the driver.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kls.compile import CompileOptions
from kls.instances import InstanceSpec

GIB = 1024**3


@dataclass(frozen=True)
class Resources:
    """What one build needs: nvcc's front end is one process; memory is its peak."""

    cpus: float = 1.0
    memory_bytes: int = 2 * GIB


def build_resources(spec: InstanceSpec, is_3x: bool) -> Resources:
    """Measured (DESIGN.md): a CUTLASS 3.x SM90 build peaks near 2 GB, a 2.x one lower."""
    return Resources(1.0, int(2.5 * GIB) if is_3x else int(1.5 * GIB))


@dataclass(frozen=True)
class BuildTask:
    id: str
    spec: InstanceSpec
    options: CompileOptions
    overrides: dict[str, str] = field(default_factory=dict)  # template path -> text
    resources: Resources = field(default_factory=Resources)
    return_bytes: bool = False  # send the library back (Ray: the driver may be elsewhere)
    # A first render in a fresh process generates the CUTLASS op list (~1-4 s on a busy
    # machine): a Ray worker renders with this deadline instead of the editor's 5 s.
    render_seconds: float = 120.0


@dataclass
class BuildOutcome:
    id: str
    ok: bool
    cached: bool = False
    seconds: float = 0.0
    error: str = ""  # the first error, in words, when not ok
    log_tail: str = ""
    artifact: str | None = None  # the library on the machine that built it
    data: bytes | None = None  # the library itself, when asked for
    node: str = ""
    key: str | None = None


def build_task(task: BuildTask, cancel: threading.Event | None = None) -> BuildOutcome:
    """Build one candidate; every failure (nvcc, render, a crash of kls itself) is an
    outcome. A set `cancel` kills the running nvcc (nothing is cached)."""
    started = time.monotonic()
    node = platform.node()
    try:
        from kls.compile import compile_instance
        from kls.compile.cache import CompileCancelled

        if task.return_bytes:  # a process of its own (Ray): set its render deadline
            from kls.sandbox.workers import WorkerLimits, configure

            configure(WorkerLimits(seconds=task.render_seconds))
        overrides = {Path(p): t for p, t in task.overrides.items()}
        result = compile_instance(task.spec, task.options, overrides or None, cancel)
    except CompileCancelled:
        return BuildOutcome(task.id, False, error="cancelled", node=node)
    except Exception as exc:  # report, never raise: one bad candidate must not end a tune
        return BuildOutcome(
            task.id,
            False,
            seconds=time.monotonic() - started,
            error=f"kls failed to build: {type(exc).__name__}: {exc}",
            node=node,
        )
    outcome = BuildOutcome(
        task.id,
        result.ok and result.artifact is not None,
        cached=result.cached,
        seconds=result.seconds,
        log_tail=result.log[-4000:],
        node=node,
        key=result.key,
    )
    if not outcome.ok:
        first = result.errors[0] if result.errors else None
        outcome.error = first.message if first is not None else "build failed"
        return outcome
    assert result.artifact is not None
    outcome.artifact = str(result.artifact)
    if task.return_bytes:
        try:
            outcome.data = result.artifact.read_bytes()
        except OSError as exc:
            outcome.ok = False
            outcome.error = f"cannot read the built library: {exc}"
    return outcome


class Executor(Protocol):
    name: str

    def describe(self) -> str: ...

    def run(self, tasks: list[BuildTask]) -> Iterator[BuildOutcome]:
        """Outcomes in completion order; every task yields exactly one (unless cancelled)."""
        ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo (bytes), None where there is none."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_slots(resources: Resources, cores: int | None = None, memory: int | None = None) -> int:
    """Concurrent builds this machine holds: one per core it needs, and its peak memory
    each out of what is free now (at least one)."""
    cores = usable_cores() if cores is None else cores
    memory = available_memory() if memory is None else memory
    by_cpu = int(cores // max(resources.cpus, 1e-9))
    by_memory = int(memory // resources.memory_bytes) if memory else by_cpu
    return max(1, min(by_cpu, by_memory))


class LocalExecutor:
    """Builds on this machine, `slots` at a time (threads that each wait on one nvcc)."""

    name = "local"

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self._cancel = threading.Event()
        self._pool = ThreadPoolExecutor(self.slots, thread_name_prefix="kls-build")

    def describe(self) -> str:
        return f"local pool, {self.slots} build(s) at a time ({usable_cores()} cores)"

    def run(self, tasks: list[BuildTask]) -> Iterator[BuildOutcome]:
        from kls.compile import compile_instance  # noqa: F401  (import once, not per thread)

        futures: dict[Future[BuildOutcome], BuildTask] = {
            self._pool.submit(self._one, t): t for t in tasks
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in done:
                if fut.cancelled():
                    continue
                yield fut.result()
            if self._cancel.is_set():
                for fut in pending:
                    fut.cancel()
                return

    def _one(self, task: BuildTask) -> BuildOutcome:
        if self._cancel.is_set():
            return BuildOutcome(task.id, False, error="cancelled")
        return build_task(task, self._cancel)

    def cancel(self) -> None:
        self._cancel.set()  # each running compile kills its nvcc group

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class RayUnavailable(Exception):
    pass


RAY_CONNECT_S = 5.0


def check_reachable(address: str | None, seconds: float = RAY_CONNECT_S) -> None:
    """Fail fast on a cluster address nothing answers at: `ray.init` retries such an address
    for minutes, printing Ray's own warnings. Only HOST:PORT (and ray://HOST:PORT) are
    checked; None, "auto" and "local" are Ray's to resolve."""
    if not address or address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(
            f"--ray-address {address!r} is not HOST:PORT (the head node's GCS port, 6379 "
            "unless `ray start --head --port` chose another)"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as exc:
        raise RayUnavailable(
            f"cannot reach the Ray cluster at {address} ({exc}); is `ray start --head` running "
            "there, and is the port open from here?"
        ) from None


class RayExecutor:
    """Each build a Ray task with `num_cpus` and `memory` declared."""

    name = "ray"

    def __init__(self, address: str | None = None, log: Callable[[str], None] | None = None):
        try:
            import ray
        except ImportError:
            raise RayUnavailable(
                "--executor ray needs Ray: pip install ray (or, in a kls checkout, "
                "pip install -e '.[ray]')"
            ) from None
        self._ray: Any = ray
        self.address = address
        check_reachable(address)
        self._refs: list[Any] = []
        self._cancelled = False
        try:
            if not ray.is_initialized():
                ray.init(
                    address=address,
                    logging_level=logging.ERROR,
                    log_to_driver=False,
                    include_dashboard=False,
                )
        except Exception as exc:  # ConnectionError, RuntimeError, ...: say it in words
            where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
            raise RayUnavailable(f"cannot connect to {where}: {exc}") from None
        self._remote = ray.remote(max_retries=1)(build_task)

    def describe(self) -> str:
        try:
            nodes = [n for n in self._ray.nodes() if n.get("Alive")]
            cpus = self._ray.cluster_resources().get("CPU", 0)
        except Exception:
            nodes, cpus = [], 0
        where = self.address or "a local cluster"
        return f"Ray at {where}: {len(nodes)} node(s), {cpus:g} CPUs"

    def run(self, tasks: list[BuildTask]) -> Iterator[BuildOutcome]:
        ray = self._ray
        by_ref: dict[Any, BuildTask] = {}
        for t in tasks:
            ref = self._remote.options(
                num_cpus=t.resources.cpus, memory=t.resources.memory_bytes
            ).remote(t)
            by_ref[ref] = t
        self._refs = list(by_ref)
        pending = list(by_ref)
        while pending and not self._cancelled:
            done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
            for ref in done:
                task = by_ref[ref]
                try:
                    yield ray.get(ref)
                except Exception as exc:  # the task or its worker died: record it
                    yield BuildOutcome(
                        task.id, False, error=f"the Ray task failed: {type(exc).__name__}: {exc}"
                    )

    def cancel(self) -> None:
        self._cancelled = True
        for ref in self._refs:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ray.shutdown()
