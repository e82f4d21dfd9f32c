"""The quick tier: clang's host-side syntax check of a rendered instance, in about a second.

`kls compile --mode quick` and the editor's on-save check run this first, then nvcc's check
(`compile_instance`), whose result replaces this one. It runs
`clang++ -x cuda --cuda-host-only -fsyntax-only` (flags in `kls.compile.clang`) against the
instance's precompiled preamble (`kls.compile.preamble`): the warm one when it is stored, else
the plain one. With no preamble yet it checks the whole file and (in the editor) builds the
plain preamble in the background for the next save, then the warm one; the CLI builds only the
plain one (a plain build and a check cost less than a warm build and a check).

Only what clang reports on the rendered file, or inside a header on behalf of a rendered line
(its instantiation notes), becomes a finding: KT606, source `clang`, mapped through the
source map exactly as nvcc's messages are. When clang is missing, too old, or fails only in
places no template line explains (a construct it does not support, a toolkit it cannot read),
the result carries one `notice` and no findings: nvcc alone decides.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from kls.cache_dir import cache_dir
from kls.checks.rendered import render_findings
from kls.checks.run import ModelCache
from kls.compile.cache import CompileCancelled, DepRoots
from kls.compile.clang import Clang, ClangUnavailable, check_command, clang_flags, find_clang
from kls.compile.diagnostics import CLANG, is_mappable, map_messages, parse_clang
from kls.compile.preamble import BACKGROUND, Preamble, PreambleStore, Split, split
from kls.compile.run import CompileOptions, CompileResult, run_in_own_group
from kls.compile.toolchain import Toolchain, ToolchainError, find_toolchain
from kls.instances import InstanceSpec
from kls.render import RenderResult
from kls.sandbox.workers import render_isolated
from kls.template.source import findings_to_file

MODE = "quick"
SOURCE_NAME = "kernel.cu"
CHECK_TIMEOUT_S = 120.0
# Preamble keys whose build clang could not do for reasons no template line explains: not
# retried in this process (each try costs seconds); the notice is given instead.
_UNHANDLED: dict[str, str] = {}
_UNHANDLED_LOCK = threading.Lock()
# Warm preambles whose warm-up did not compile: the entry texts tried. A warm build is tried
# again only after a clean check of a new entry text, and not after WARM_TRIES failures.
_WARM_FAILED: dict[str, set[str]] = {}
WARM_TRIES = 2

__all__ = ["MODE", "prepare_preamble", "quick_check"]


def quick_check(
    instance: InstanceSpec,
    options: CompileOptions,
    overrides: dict[Path, str] | None = None,
    cancel: threading.Event | None = None,
    store: PreambleStore | None = None,
    wait_for_preamble: bool = True,
) -> CompileResult:
    """clang's findings for `instance` (in the templates' files), or a notice why there are
    none. `wait_for_preamble`: build a missing preamble now (the CLI) rather than checking the
    whole file and building it in the background (the editor)."""
    started = time.monotonic()
    result = CompileResult(instance.name, MODE, ok=True)
    quick = _Quick.prepare(instance, options, overrides, result, store)
    if quick is not None:
        quick.run(result, cancel, wait_for_preamble)
    result.findings = findings_to_file(result.findings, overrides)
    result.seconds = time.monotonic() - started
    return result


def prepare_preamble(
    instance: InstanceSpec,
    options: CompileOptions,
    overrides: dict[Path, str] | None = None,
    store: PreambleStore | None = None,
) -> Future[Preamble | None] | None:
    """Start building the instance's preambles in the background unless they are stored (an
    instance opened in the editor, or whose op changed): the plain one, then the warm one.
    The future of the first still to build; None when there is nothing to do."""
    result = CompileResult(instance.name, MODE, ok=True)
    quick = _Quick.prepare(instance, options, overrides, result, store)
    if quick is None or quick.parts is None or quick.key is None or quick.key in _UNHANDLED:
        return None
    plain = quick.store.lookup(quick.key, quick.roots())
    if plain is None:
        return quick.build_in_background()
    if quick.warm(plain) is not None:
        return None
    return quick.warm_in_background(plain)


class _Quick:
    """One quick check's inputs: toolchain, clang, the render and its preamble's key."""

    def __init__(
        self,
        store: PreambleStore,
        clang: Clang,
        flags: list[str],
        rendered: RenderResult,
        text: str,
        project: Path,
        tc: Toolchain,
    ) -> None:
        self.store = store
        self.clang = clang
        self.flags = flags
        self.rendered = rendered
        self.text = text
        self.parts: Split | None = split(text)
        self.tc = tc
        self.project = project
        self.key: str | None = None  # the plain preamble's
        if self.parts is not None:
            self.key = store.key(tc, clang, flags, self.parts.preamble, project)

    @classmethod
    def prepare(
        cls,
        instance: InstanceSpec,
        options: CompileOptions,
        overrides: dict[Path, str] | None,
        result: CompileResult,
        store: PreambleStore | None,
    ) -> _Quick | None:
        """None (with `result` filled: a notice, or render findings) when clang cannot run."""
        try:
            tc = find_toolchain(options.nvcc, options.cutlass_include)
            clang = find_clang(options.clang)
            project = Path(os.path.abspath(instance.template)).parent
            flags = clang_flags(tc, options.arch or instance.arch, project, options.extra_flags)
        except ToolchainError as exc:
            result.notice = f"quick check skipped: {exc}"
            return None
        except ClangUnavailable as exc:
            result.notice = f"quick check (clang) skipped: {exc}; nvcc's check alone runs"
            return None
        rendered = render_isolated(instance, overrides)
        result.rendered = rendered
        if not rendered.ok or rendered.text is None:
            result.ok = False
            result.findings = render_findings(rendered, ModelCache(overrides).for_render(rendered))
            return None
        return cls(
            store or PreambleStore(), clang, flags, rendered, rendered.text + "\n", project, tc
        )

    def roots(self, key: str | None = None) -> DepRoots:
        key = key or self.key
        assert key is not None
        return self.store.roots(key, self.tc, self.project)

    def _build(self, cancel: threading.Event | None, background: bool) -> Preamble:
        """The plain preamble, built now unless stored."""
        assert self.key is not None and self.parts is not None
        preamble = self.store.build(
            self.key, self.roots(), self.clang, self.flags, self.parts, cancel, background
        )
        if not preamble.ok and not _own_errors(preamble):
            with _UNHANDLED_LOCK:
                _UNHANDLED[self.key] = _first_error(preamble.log)
        return preamble

    def warm(self, plain: Preamble) -> Preamble | None:
        """The stored warm preamble chained on `plain`, if any."""
        key = self.store.warm_key(plain)
        return None if key is None else self.store.lookup(key, self.roots(key))

    def _build_warm(self, cancel: threading.Event | None, background: bool) -> Preamble | None:
        """The warm preamble, built now unless stored; None when there is no usable plain
        one (the warm-up would fail the same way) or its warm-up failed."""
        assert self.key is not None and self.parts is not None
        plain = self.store.lookup(self.key, self.roots())
        key = None if plain is None else self.store.warm_key(plain)
        if plain is None or key is None:
            return None
        warm = self.store.build(
            key, self.roots(key), self.clang, self.flags, self.parts, cancel, background, plain
        )
        if warm.ok:
            return warm
        with _UNHANDLED_LOCK:
            _WARM_FAILED.setdefault(key, set()).add(self.parts.rest)
        return None

    def build_in_background(self) -> Future[Preamble | None]:
        """The plain preamble, then the warm one (one build at a time): the plain one's
        future."""
        assert self.key is not None
        future = BACKGROUND.submit(self.key, lambda: self._build(None, background=True))
        BACKGROUND.submit(self.key + "-warm", lambda: self._build_warm(None, background=True))
        return future

    def warm_in_background(self, plain: Preamble) -> Future[Preamble | None] | None:
        """The warm preamble chained on `plain` in the background, unless its warm-up already
        failed with this entry text or too often; the future of its build."""
        assert self.key is not None and self.parts is not None
        failed = _WARM_FAILED.get(self.store.warm_key(plain) or "", set())
        if self.parts.rest in failed or len(failed) >= WARM_TRIES:
            return None
        build = lambda: self._build_warm(None, background=True)  # noqa: E731
        return BACKGROUND.submit(self.key + "-warm", build)

    def run(
        self, result: CompileResult, cancel: threading.Event | None, wait_for_preamble: bool
    ) -> None:
        preamble: Preamble | None = None
        warm = False
        if self.key is not None and self.parts is not None:
            unhandled = _UNHANDLED.get(self.key)
            if unhandled is not None:
                result.notice = _cannot_handle(unhandled)
                return
            plain = self.store.lookup(self.key, self.roots())
            if plain is None and wait_for_preamble:
                plain = self._build(cancel, background=False)
            elif plain is None:
                self.build_in_background()
            preamble = None if plain is None else self.warm(plain)
            warm = preamble is not None
            preamble = preamble or plain
            if preamble is not None and not preamble.ok:
                if not _own_errors(preamble):
                    result.notice = _cannot_handle(_first_error(preamble.log))
                    return
                # a mistake in the preamble itself: its lines are the rendered file's
                self._report(result, preamble.log, preamble.source)
                return
        pch = preamble.pch if preamble is not None else None
        body = self.parts.body if (pch is not None and self.parts is not None) else self.text
        log, source = self._check(body, pch, cancel)
        errors = [m for m in parse_clang(log) if m.is_error]
        if errors and pch is not None and not any(is_mappable(m, source) for m in errors):
            log, source = self._check(self.text, None, cancel)  # the PCH itself may be at fault
            errors = [m for m in parse_clang(log) if m.is_error]
        if errors and not any(is_mappable(m, source) for m in errors):
            result.notice = _cannot_handle(_first_error(log))
            return
        self._report(result, log, source)
        result.command = check_command(self.clang, self.flags, source, pch)
        if pch is not None and not warm and not errors and not wait_for_preamble:
            # checked against the plain preamble: a clean entry text makes a good warm-up
            assert preamble is not None
            self.warm_in_background(preamble)

    def _check(
        self, text: str, pch: Path | None, cancel: threading.Event | None
    ) -> tuple[str, Path]:
        with tempfile.TemporaryDirectory(dir=cache_dir("quick"), prefix="check-") as tmp:
            source = Path(tmp) / SOURCE_NAME
            source.write_text(text, encoding="utf-8")
            command = check_command(self.clang, self.flags, source, pch)
            log, _ = run_in_own_group(command, Path(tmp), CHECK_TIMEOUT_S, cancel, None)
        if log is None:
            raise CompileCancelled()  # timed out: no verdict from the quick tier
        return log, source

    def _report(self, result: CompileResult, log: str, source: Path) -> None:
        # Wrong-side calls (a __host__ function in device code) are nvcc's to judge: it
        # warns where clang's overloading finds no candidate (planted in the agreement corpus).
        messages = [
            m
            for m in parse_clang(log)
            if m.is_error and is_mappable(m, source) and not m.wrong_side
        ]
        findings = map_messages(messages, source, self.rendered, tool=CLANG)
        result.findings = [dataclasses.replace(f, instance=result.instance) for f in findings]
        result.log = log
        result.ok = not findings


def _own_errors(preamble: Preamble) -> bool:
    errors = [m for m in parse_clang(preamble.log) if m.is_error]
    return bool(errors) and any(is_mappable(m, preamble.source) for m in errors)


def _first_error(log: str) -> str:
    errors = [m for m in parse_clang(log) if m.is_error]
    if errors:
        return f"{Path(errors[0].file).name}:{errors[0].line}: {errors[0].text}"[:300]
    first = next((ln for ln in log.splitlines() if ln.strip()), "no output")
    return first[:300]


def _cannot_handle(reason: str) -> str:
    return f"quick check (clang) cannot handle this template ({reason}); nvcc's check alone decides"
