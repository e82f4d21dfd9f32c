"""Precompiled preambles for the quick tier: everything before `extern "C"`, built once.

A rendered CUTLASS instance is ~100 lines of `#include`s and the op's `instance_definition`
(the expensive part: instantiating CUTLASS), then the entry function, which is what a save
almost always changes. The preamble is the rendered text up to the first line that starts
with `extern "C"`; clang precompiles it (`-emit-pch`) and the check runs over the rest. The
file checked against it is the whole rendered text with the preamble's lines left empty, so
every line number clang reports, in the preamble or after it, is the rendered file's line and
the source map applies unchanged.

So that the check does not redo the instantiations the entry function asks for (`gemm_op.run`,
`can_implement`, ...: 1.8 s of the 2.2 s), a second PCH precompiles a *warm-up*: the entry
code as it was when that PCH was built, inside a kls namespace with `extern "C"` blocks turned
into namespaces. Templates it uses are instantiated into the PCH
(`-fpch-instantiate-templates`). The warm-up does not change what is checked (it lives in its
own namespace, and the real entry code is checked in full every time).

Preambles come in two stages, stored under keys of their own. The *plain* one (the preamble
alone: ~6 s for the SM90 GEMM on 2 cores) is built first, so that saves can use it at once
(~2.2 s a check). The *warm* one is the warm-up alone, precompiled on top of the plain one (a
chained PCH: ~2.7 s, where precompiling the preamble and the warm-up together took ~8.5 s),
built right after it in the background; checks switch to it as soon as it is stored (~0.5 s).
A chained PCH names the plain PCH's file and is only valid with that very file, so the warm
key is the plain key and the plain PCH's mtime and size (`warm_key`): a rebuilt plain preamble
orphans the old warm one (evicted in time), and the plain one is looked up (and its use
recorded) before the warm one, so it is never evicted first. A warm-up that does not compile
(the entry code had a mistake, or declares something a namespace cannot hold) leaves the plain
preamble in use; it is not cached.

Preambles are entries of a `CompileCache` of their own (`~/.cache/kls/preamble`), keyed like
compiles: the preamble's text, clang's whole command with machine paths neutralised, clang's
and nvcc's versions and the environment, and validated on every hit against the files clang
read (`-MD -MF`). The least recently used are evicted past a size (`MAX_BYTES`). Background
builds run one at a time at a lower CPU priority.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kls.cache_dir import cache_dir
from kls.compile.cache import RESULT, CompileCache, DepRoots, Entry, compile_key, record_deps
from kls.compile.clang import Clang, pch_command
from kls.compile.diagnostics import is_mappable, parse_clang
from kls.compile.run import portable_command, run_in_own_group
from kls.compile.toolchain import Toolchain, nvcc_environment

SOURCE_NAME = "kernel.cu"  # the same name as the checked file: both map as the rendered file
PCH_NAME = "preamble.pch"
DEPS_NAME = "preamble.d"
USED = "used"  # touched on every use: eviction goes by its mtime
MAX_BYTES = 1024 * 1024 * 1024  # ~12 SM90 GEMM preambles (70-85 MB each)
KEY_FORMAT = "kls-preamble-2"
BUILD_TIMEOUT_S = 300.0
WARM_NAMESPACE = "__kls_preamble_warmup"
_EXTERN_C_BLOCK = re.compile(r'\bextern\s+"C"\s*\{')
_EXTERN_C = re.compile(r'\bextern\s+"C"')


@dataclass(frozen=True)
class Split:
    preamble: str  # rendered lines [0, lines), each with its newline
    lines: int
    body: str  # the rendered text with the preamble's lines emptied (same line numbers)
    rest: str  # the text from line `lines` on


def split(text: str) -> Split | None:
    """The preamble of a rendered text: the lines before the first that starts with
    `extern "C"`; None when there is none (or nothing before it)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith('extern "C"'):
            if i == 0 or not any(ln.strip() for ln in lines[:i]):
                return None
            preamble = "".join(ln + "\n" for ln in lines[:i])
            rest = "\n".join(lines[i:])
            return Split(preamble, i, "\n" * i + rest, rest)
    return None


def warmup(rest: str) -> str:
    """The entry code in a namespace of its own: `extern "C" {` opens a nested namespace and a
    bare `extern "C"` goes, so nothing in it can clash with the checked entry code."""
    code = _EXTERN_C.sub("", _EXTERN_C_BLOCK.sub(f"namespace {WARM_NAMESPACE}_c {{", rest))
    return f"namespace {WARM_NAMESPACE} {{\n{code}\n}}\n"


@dataclass
class Preamble:
    """A built (or failed) preamble: `pch` when clang could precompile it, else the log of
    the failure (mapped by the caller: the preamble's lines are the rendered file's)."""

    key: str
    ok: bool
    pch: Path | None
    log: str
    seconds: float
    source: Path  # the precompiled text's file (its errors name it)
    cached: bool


class PreambleStore:
    def __init__(self, root: Path | None = None, max_bytes: int = MAX_BYTES) -> None:
        self.cache = CompileCache(root or cache_dir("preamble"))
        self.max_bytes = max_bytes

    def key(
        self, tc: Toolchain, clang: Clang, flags: list[str], preamble: str, project: Path
    ) -> str:
        """The plain preamble's key."""
        command = portable_command(flags, tc, project)
        versions = f"{KEY_FORMAT}|clang {clang.version} {clang.path} {clang.resource_dir}|nvcc "
        versions += f"{tc.nvcc_version}|cutlass {tc.cutlass_version}"
        return compile_key(preamble, command, versions, nvcc_environment())

    @staticmethod
    def warm_key(plain: Preamble) -> str | None:
        """The key of the warm preamble chained on `plain` (a usable plain preamble): it does
        not depend on the entry code its warm-up was made of (any version speeds up a check),
        but on the plain PCH's very file. None when that file is gone."""
        if not plain.ok or plain.pch is None:
            return None
        try:
            st = plain.pch.stat()
        except OSError:
            return None
        text = f"{plain.key}|warm|{st.st_mtime_ns}|{st.st_size}"
        return hashlib.sha256(text.encode()).hexdigest()

    def roots(self, key: str, tc: Toolchain, project: Path) -> DepRoots:
        folder = self.cache.folder(key)
        return DepRoots(folder / SOURCE_NAME, tc.cutlass_root, tuple(tc.toolkit_headers()), project)

    def lookup(self, key: str, roots: DepRoots) -> Preamble | None:
        """The stored preamble if every file it read is unchanged (no waiting on a build)."""
        entry = self.cache.get(key, roots)
        return None if entry is None else self._preamble(key, entry, cached=True)

    def build(
        self,
        key: str,
        roots: DepRoots,
        clang: Clang,
        flags: list[str],
        split_text: Split,
        cancel: threading.Event | None = None,
        background: bool = False,
        base: Preamble | None = None,
    ) -> Preamble:
        """The preamble for `key`, built now unless stored (another process building it is
        waited for): the plain one, or with `base` (the plain one) the warm one chained on it
        (`key` is then `warm_key(base)`; when its warm-up fails it is not stored and `ok` is
        false)."""
        with self.cache.lock(key, cancel):
            entry = self.cache.get(key, roots)
            if entry is not None:
                return self._preamble(key, entry, cached=True)
            folder = self.cache.reset(key)
            started = time.monotonic()
            entry = self._run(folder, roots, clang, flags, split_text, base, cancel, background)
            entry.seconds = time.monotonic() - started
            if entry.deps is not None:
                self.cache.put(key, entry)
        self.evict()
        return self._preamble(key, entry, cached=False)

    def _run(
        self,
        folder: Path,
        roots: DepRoots,
        clang: Clang,
        flags: list[str],
        split_text: Split,
        base: Preamble | None,
        cancel: threading.Event | None,
        background: bool,
    ) -> Entry:
        warm = base is not None
        text = warmup(split_text.rest) if warm else split_text.preamble
        (folder / SOURCE_NAME).write_text(text, encoding="utf-8")
        partial = folder / f".{PCH_NAME}.partial"
        base_pch = base.pch if base is not None else None
        command = pch_command(
            clang, flags, folder / SOURCE_NAME, partial, folder / DEPS_NAME, base_pch
        )
        started_ns = time.time_ns()
        started = time.monotonic()
        log, code = run_in_own_group(
            command, folder, BUILD_TIMEOUT_S, cancel, None, nice=10 if background else 0
        )
        seconds = time.monotonic() - started
        if log is None:
            return Entry(False, -1, "clang timed out building the preamble", seconds, None, None)
        ok = code == 0 and partial.is_file()
        if ok:
            os.replace(partial, folder / PCH_NAME)
        elif warm or not _preamble_errors(log, folder / SOURCE_NAME, split_text.lines):
            # the warm-up failed (the plain preamble stays in use), or clang could not run
            return Entry(False, code, log, seconds, None, None)
        deps = record_deps(folder / DEPS_NAME, folder, roots, started_ns) if code >= 0 else None
        return Entry(ok, code, log, seconds, PCH_NAME if ok else None, deps)

    def _preamble(self, key: str, entry: Entry, cached: bool) -> Preamble:
        folder = self.cache.folder(key)
        with contextlib.suppress(OSError):
            (folder / USED).touch()
        pch = folder / entry.artifact if entry.ok and entry.artifact else None
        return Preamble(key, entry.ok, pch, entry.log, entry.seconds, folder / SOURCE_NAME, cached)

    def evict(self) -> int:
        """Remove the least recently used preambles until the store is under `max_bytes`."""
        entries: list[tuple[float, int, Path]] = []
        for result in self.cache.root.glob(f"*/*/{RESULT}"):
            folder = result.parent
            size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
            used = folder / USED
            stamp = used.stat().st_mtime if used.exists() else result.stat().st_mtime
            entries.append((stamp, size, folder))
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, folder in sorted(entries):
            if total <= self.max_bytes:
                break
            shutil.rmtree(folder, ignore_errors=True)
            total -= size
            removed += 1
        return removed


def _preamble_errors(log: str, source: Path, lines: int) -> bool:
    """The failed build's errors are the preamble's own (on its lines or instantiated from
    them): a mistake in the template, worth caching and reporting, not clang's incapacity."""
    messages = [m for m in parse_clang(log) if m.is_error]
    return bool(messages) and all(is_mappable(m, source) for m in messages)


class BackgroundBuilds:
    """Preamble builds off the caller's thread, one at a time, one per key."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kls-preamble")
        self._lock = threading.Lock()
        self._running: dict[str, Future[Preamble | None]] = {}

    def submit(self, key: str, build: Callable[[], Preamble | None]) -> Future[Preamble | None]:
        with self._lock:
            running = self._running.get(key)
            if running is not None:
                return running
            future = self._pool.submit(build)
            self._running[key] = future
        future.add_done_callback(lambda _: self._done(key))
        return future

    def pending(self, key: str) -> Future[Preamble | None] | None:
        with self._lock:
            return self._running.get(key)

    def _done(self, key: str) -> None:
        with self._lock:
            self._running.pop(key, None)


BACKGROUND = BackgroundBuilds()
