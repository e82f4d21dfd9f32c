"""Compile one instance: render, look up the cache, run nvcc (cancellable, bounded), map errors."""

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

from kls.checks.rendered import render_findings
from kls.checks.run import ModelCache
from kls.compile.cache import CompileCache, Entry, compile_key
from kls.compile.command import MODES, nvcc_command
from kls.compile.diagnostics import map_messages, parse_nvcc
from kls.compile.toolchain import Toolchain, ToolchainError, find_toolchain
from kls.findings import Finding, Severity
from kls.instances import InstanceSpec
from kls.positions import Range
from kls.render import RenderResult, render

SOURCE_NAME = "kernel.cu"


class CompileCancelled(Exception):
    pass


@dataclass(frozen=True)
class CompileOptions:
    mode: str = "check"
    nvcc: str = "nvcc"
    cutlass_include: str | None = None
    arch: str | None = None  # override the instance's
    opt_level: str = "-O1"
    extra_flags: tuple[str, ...] = ()
    timeout_s: float = 600.0


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
    if options.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    result = CompileResult(instance.name, options.mode, ok=False)
    started = time.monotonic()
    try:
        toolchain = find_toolchain(options.nvcc, options.cutlass_include)
    except ToolchainError as exc:
        result.findings.append(_at_entry(instance, exc.code, str(exc)))
        return result
    rendered = render(instance, overrides)
    result.rendered = rendered
    if not rendered.ok or rendered.text is None:
        result.findings = render_findings(rendered, ModelCache(overrides).for_render(rendered))
        return result
    cache = cache or CompileCache()
    source_text = rendered.text + "\n"
    output_name = "kernel.so" if options.mode == "build" else "kernel.ptx"
    arch = options.arch or instance.arch
    # The key uses neutral file names: the command is the same wherever the cache lives.
    neutral = nvcc_command(
        toolchain,
        options.mode,
        arch,
        Path(SOURCE_NAME),
        Path(output_name),
        options.opt_level,
        options.extra_flags,
    )
    key = compile_key(
        source_text,
        _portable(neutral[1:], toolchain),
        toolchain.nvcc_version,
        toolchain.cutlass_version,
    )
    result.key = key
    folder = cache.folder(key)
    with cache.lock(key):
        entry = cache.get(key)
        if entry is None:
            entry = _run_nvcc(
                toolchain, options, arch, folder, source_text, output_name, cancel, on_nvcc_start
            )
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


def _portable(command: list[str], tc: Toolchain) -> list[str]:
    """The command without machine-specific paths: the same compile on another machine (same
    nvcc and CUTLASS versions) has the same key, so a cache can travel."""
    root = str(tc.cutlass_root)
    return [arg.replace(root, "<cutlass>") for arg in command]


def _run_nvcc(
    tc: Toolchain,
    options: CompileOptions,
    arch: str,
    folder: Path,
    source_text: str,
    output_name: str,
    cancel: threading.Event | None,
    on_start: Callable[[], None] | None,
) -> Entry:
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / SOURCE_NAME
    source.write_text(source_text, encoding="utf-8")
    output = folder / output_name
    tmp_output = folder / f".{output_name}.partial"
    command = nvcc_command(
        tc, options.mode, arch, source, tmp_output, options.opt_level, options.extra_flags
    )
    started = time.monotonic()
    # A new session: cancelling kills nvcc and every child (cicc, ptxas, gcc) as a group.
    proc = subprocess.Popen(
        command,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if on_start is not None:
        on_start()
    output_text = _wait(proc, options.timeout_s, cancel)
    seconds = time.monotonic() - started
    if output_text is None:
        return Entry(
            False,
            -1,
            f"nvcc ran past the {options.timeout_s:g} s timeout and was "
            "stopped; raise kls.compileTimeout or simplify the instance",
            seconds,
            None,
        )
    ok = proc.returncode == 0
    artifact = None
    if ok and tmp_output.is_file():
        os.replace(tmp_output, output)
        artifact = output_name
    return Entry(ok, proc.returncode, output_text, seconds, artifact)


def _wait(
    proc: subprocess.Popen[str], timeout: float, cancel: threading.Event | None
) -> str | None:
    """nvcc's output, or None on timeout; raises CompileCancelled if `cancel` is set."""
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
            _kill(proc)
            raise CompileCancelled()
        if time.monotonic() > deadline:
            _kill(proc)
            return None
    reader.join(timeout=5)
    return "".join(chunks)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


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
