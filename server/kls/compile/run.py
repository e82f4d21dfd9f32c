"""Compile one instance: render, look up the cache, run nvcc (cancellable, bounded), map errors.

nvcc runs in its own process group (it starts cicc, ptxas and gcc); every running group is in
`CHILDREN`, so a cancel, a timeout, Ctrl-C or kls exiting kills the whole group, and a compile
that was killed is never cached.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kls.checks.rendered import render_findings
from kls.checks.run import ModelCache
from kls.compile.cache import (
    CompileCache,
    CompileCancelled,
    DepRoots,
    Entry,
    compile_key,
    record_deps,
)
from kls.compile.command import MODES, nvcc_command
from kls.compile.diagnostics import map_messages, parse_nvcc
from kls.compile.toolchain import Toolchain, ToolchainError, find_toolchain, nvcc_environment
from kls.findings import Finding, Severity
from kls.instances import InstanceSpec
from kls.positions import Range
from kls.profiles import profile
from kls.render import RenderResult
from kls.sandbox.workers import render_isolated
from kls.template.source import findings_to_file

SOURCE_NAME = "kernel.cu"
DEPS_NAME = "kernel.d"

__all__ = ["CHILDREN", "CompileCancelled", "CompileOptions", "CompileResult", "compile_instance"]


class ChildGroups:
    """The process groups of the nvccs running now, so exit paths can kill them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._closed = False

    def add(self, pgid: int) -> bool:
        """Track a new group; False once kls is exiting (the caller kills it)."""
        with self._lock:
            if not self._closed:
                self._groups.add(pgid)
            return not self._closed

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)

    @property
    def closed(self) -> bool:
        return self._closed

    def kill_all(self) -> None:
        """Kill every running nvcc with all its children; later compiles are refused."""
        with self._lock:
            self._closed = True
            groups = list(self._groups)
        for pgid in groups:
            _killpg(pgid)


CHILDREN = ChildGroups()


def kill_children() -> None:
    """For signal handlers and atexit: no nvcc, cicc or ptxas outlives kls."""
    CHILDREN.kill_all()


@dataclass(frozen=True)
class CompileOptions:
    mode: str = "check"
    nvcc: str = "nvcc"
    cutlass_include: str | None = None
    arch: str | None = None  # override the instance's
    opt_level: str = "-O1"
    extra_flags: tuple[str, ...] = ()
    timeout_s: float = 600.0
    clang: str | None = None  # the quick tier's clang (kls.clangPath / --clang); None: PATH


@dataclass
class CompileResult:
    instance: str
    mode: str
    ok: bool
    cached: bool = False
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    log: str = ""
    artifact: Path | None = None
    command: list[str] = field(default_factory=list)
    key: str | None = None
    rendered: RenderResult | None = None  # the render that was compiled (its C parameters too)
    # The quick tier only: why it did not run (clang missing or unable), said once to the user.
    notice: str | None = None
    # A Triton compile only: Triton's figures (registers, shared, stack, local, kernel_line)
    # and its listings (ptx, sass, the source file their line info names).
    triton: dict[str, Any] | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]


def compile_instance(
    instance: InstanceSpec,
    options: CompileOptions,
    overrides: dict[Path, str] | None = None,
    cancel: threading.Event | None = None,
    cache: CompileCache | None = None,
    on_nvcc_start: Callable[[], None] | None = None,
) -> CompileResult:
    """Render and compile `instance`; findings are in the templates' files (a template in a
    Python constant: the .py file's own lines and columns)."""
    result = _compile_instance(instance, options, overrides, cancel, cache, on_nvcc_start)
    result.findings = findings_to_file(result.findings, overrides)
    return result


def _compile_instance(
    instance: InstanceSpec,
    options: CompileOptions,
    overrides: dict[Path, str] | None = None,
    cancel: threading.Event | None = None,
    cache: CompileCache | None = None,
    on_nvcc_start: Callable[[], None] | None = None,
) -> CompileResult:
    if options.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    result = CompileResult(instance.name, options.mode, ok=False)
    started = time.monotonic()
    if profile(instance.profile).language == "python":  # a Triton module: Triton's compile
        from kls.compile.triton import compile_triton

        ok, findings, rendered, figures, cached = compile_triton(instance, overrides)
        result.ok, result.findings, result.rendered, result.cached = ok, findings, rendered, cached
        result.triton = figures or None
        result.seconds = time.monotonic() - started
        return result
    try:
        toolchain = find_toolchain(options.nvcc, options.cutlass_include)
    except ToolchainError as exc:
        result.findings.append(_at_entry(instance, exc.code, str(exc)))
        return result
    rendered = render_isolated(instance, overrides)
    result.rendered = rendered
    if not rendered.ok or rendered.text is None:
        result.findings = render_findings(rendered, ModelCache(overrides).for_render(rendered))
        return result
    cache = cache or CompileCache()
    source_text = rendered.text + "\n"
    output_name = "kernel.so" if options.mode == "build" else "kernel.ptx"
    arch = options.arch or instance.arch
    project = Path(os.path.abspath(instance.template)).parent
    # The key uses neutral file names: the command is the same wherever the cache lives.
    neutral = nvcc_command(
        toolchain,
        options.mode,
        arch,
        Path(SOURCE_NAME),
        Path(output_name),
        options.opt_level,
        options.extra_flags,
        project,
        Path(DEPS_NAME),
    )
    key = compile_key(
        source_text,
        portable_command(neutral[1:], toolchain, project),
        toolchain.nvcc_version,
        nvcc_environment(),
    )
    result.key = key
    folder = cache.folder(key)
    roots = DepRoots(
        folder / SOURCE_NAME, toolchain.cutlass_root, tuple(toolchain.toolkit_headers()), project
    )
    with cache.lock(key, cancel):
        entry = cache.get(key, roots)
        if entry is None:
            cache.reset(key)
            run = _NvccRun(toolchain, options, arch, folder, output_name, project)
            entry = run.run(source_text, roots, cancel, on_nvcc_start)
            if entry.deps is not None:
                cache.put(key, entry)
        else:
            result.cached = True
    result.command = nvcc_command(
        toolchain,
        options.mode,
        arch,
        folder / SOURCE_NAME,
        folder / output_name,
        options.opt_level,
        options.extra_flags,
        project,
        folder / DEPS_NAME,
    )
    result.ok = entry.ok
    result.log = entry.log
    result.artifact = folder / entry.artifact if entry.artifact else None
    result.findings = map_messages(parse_nvcc(entry.log), folder / SOURCE_NAME, rendered)
    if entry.returncode == -1:  # timed out
        result.findings.insert(0, _at_entry(instance, "KT603", entry.log.splitlines()[0]))
    elif not entry.ok and not result.errors:
        first = next((ln for ln in entry.log.splitlines() if ln.strip()), "no output")
        result.findings.insert(0, _at_entry(instance, "KT601", f"nvcc failed: {first[:300]}"))
    result.seconds = time.monotonic() - started if not result.cached else entry.seconds
    return result


def portable_command(command: list[str], tc: Toolchain, project: Path) -> list[str]:
    """The command without machine-specific include paths: the same compile elsewhere (same
    nvcc) has the same key, so a cache can travel; the recorded dependencies, resolved against
    this machine's CUTLASS tree and template folder, decide whether the entry still holds."""
    roots = sorted(
        [(str(tc.cutlass_root), "<cutlass>"), (str(project), "<project>")],
        key=lambda r: len(r[0]),
        reverse=True,
    )
    return [_neutral_include(arg, roots) for arg in command]


def _neutral_include(arg: str, roots: list[tuple[str, str]]) -> str:
    if not arg.startswith("-I"):
        return arg
    path = arg[2:]
    for root, label in roots:
        if path == root or path.startswith(root + os.sep):
            return "-I" + label + path[len(root) :]
    return arg


@dataclass(frozen=True)
class _NvccRun:
    """One nvcc invocation writing into an (emptied) cache entry folder."""

    tc: Toolchain
    options: CompileOptions
    arch: str
    folder: Path
    output_name: str
    project: Path

    def command(self, output: Path) -> list[str]:
        return nvcc_command(
            self.tc,
            self.options.mode,
            self.arch,
            self.folder / SOURCE_NAME,
            output,
            self.options.opt_level,
            self.options.extra_flags,
            self.project,
            self.folder / DEPS_NAME,
        )

    def run(
        self,
        source_text: str,
        roots: DepRoots,
        cancel: threading.Event | None,
        on_start: Callable[[], None] | None,
    ) -> Entry:
        """nvcc's result; its `deps` are None (not cacheable) after a timeout, a kill or a
        dependency list that cannot be trusted. Raises CompileCancelled if cancelled."""
        (self.folder / SOURCE_NAME).write_text(source_text, encoding="utf-8")
        tmp_output = self.folder / f".{self.output_name}.partial"
        started_ns = time.time_ns()
        started = time.monotonic()
        output_text, returncode = run_in_own_group(
            self.command(tmp_output), self.folder, self.options.timeout_s, cancel, on_start
        )
        seconds = time.monotonic() - started
        if output_text is None:
            return Entry(
                False,
                -1,
                f"nvcc ran past the {self.options.timeout_s:g} s timeout and was "
                "stopped; simplify the instance (no setting raises this limit)",
                seconds,
                None,
                None,
            )
        ok = returncode == 0
        artifact = None
        if ok and tmp_output.is_file():
            os.replace(tmp_output, self.folder / self.output_name)
            artifact = self.output_name
        deps = None
        if returncode >= 0:  # killed by a signal (out of memory?): try again next time
            deps = record_deps(self.folder / DEPS_NAME, self.folder, roots, started_ns)
        return Entry(ok, returncode, output_text, seconds, artifact, deps)


def run_in_own_group(
    command: list[str],
    cwd: Path,
    timeout: float,
    cancel: threading.Event | None,
    on_start: Callable[[], None] | None,
    nice: int = 0,
) -> tuple[str | None, int]:
    """(output, returncode) of `command`, or (None, -1) on timeout. It runs in a new session:
    a cancel, Ctrl-C (KeyboardInterrupt here) or any other exception kills nvcc and every
    child (cicc, ptxas, gcc) as a group. Raises CompileCancelled if cancelled or exiting.
    `nice` lowers its CPU priority (background work: clang's preamble builds)."""
    if CHILDREN.closed:
        raise CompileCancelled()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        return f"cannot run {command[0]}: {exc}", 127
    try:
        if not CHILDREN.add(proc.pid):
            raise CompileCancelled()
        if nice:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        if on_start is not None:
            on_start()
        output = _wait(proc, timeout, cancel)
        if CHILDREN.closed and proc.returncode is not None and proc.returncode < 0:
            raise CompileCancelled()  # killed by kill_children(): kls is exiting
        return output, proc.returncode if output is not None else -1
    except BaseException:
        _kill(proc)
        raise
    finally:
        CHILDREN.discard(proc.pid)


def _wait(
    proc: subprocess.Popen[str], timeout: float, cancel: threading.Event | None
) -> str | None:
    """nvcc's output, or None on timeout (nvcc killed); raises CompileCancelled if `cancel` is
    set (the caller kills nvcc)."""
    deadline = time.monotonic() + timeout
    chunks: list[str] = []
    reader = threading.Thread(
        target=lambda: chunks.append(proc.stdout.read() if proc.stdout else ""), daemon=True
    )
    reader.start()
    while True:
        try:
            proc.wait(timeout=0.05)  # returns the moment nvcc ends: no polling delay
            break
        except subprocess.TimeoutExpired:
            pass
        if cancel is not None and cancel.is_set():
            raise CompileCancelled()
        if time.monotonic() > deadline:
            _kill(proc)
            return None
    reader.join(timeout=5)
    return "".join(chunks)


def _kill(proc: subprocess.Popen[str]) -> None:
    _killpg(proc.pid)
    proc.wait()


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _at_entry(instance: InstanceSpec, code: str, message: str) -> Finding:
    return Finding(
        code,
        Severity.ERROR,
        Range.of_line(0),
        message,
        str(instance.template),
        instance.name,
        source="nvcc",
    )
