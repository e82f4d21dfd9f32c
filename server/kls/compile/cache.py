"""The compile cache: content-addressed entries, atomic writes, one nvcc per key across processes.

Key = sha256 of (rendered source, full command with machine paths neutralised, nvcc version,
the environment nvcc honours). That is not all a compile reads: nvcc also writes the list of
files it read (`-MD -MF`), and the entry records each one with its mtime, size and sha256. A hit
stats them; a changed mtime or size re-hashes the file; different content is a miss and nvcc
runs again. Headers inside the CUDA toolkit are trusted by nvcc's version and not recorded.

An entry holds the result (ok or the failure with its log), the dependencies and, for builds,
the library; failures are cached too, so re-saving an unchanged broken template costs nothing.
Anything in the cache folder of the wrong shape (bad JSON types, a directory or a symlink where
a file belongs, an artifact name that leaves the entry folder) is discarded, never trusted.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kls.cache_dir import cache_dir, write_atomic

KEY_FORMAT = "kls-compile-3"  # bump when the key's parts or the entry's fields change
RESULT = "result.json"
LOCK = ".lock"
LOCK_POLL_S = 0.05
MAX_RESULT_BYTES = 64 * 1024 * 1024
# A dependency whose mtime is this close to (or after) the compile's start may have changed
# while nvcc read it (file system clocks lag by up to a tick): such a compile is not cached.
RACE_MARGIN_NS = 20_000_000
_SHA256 = re.compile(r"[0-9a-f]{64}")


class CompileCancelled(Exception):
    """The compile was cancelled (or kls is exiting): nvcc was killed and nothing was cached."""


@dataclass(frozen=True)
class Dep:
    """One file the compile read. `path` is portable: `<cutlass>/…` and `<project>/…` resolve
    against this compile's CUTLASS tree and template folder, anything else is absolute."""

    path: str
    mtime_ns: int
    size: int
    sha256: str


@dataclass
class Entry:
    ok: bool
    returncode: int
    log: str
    seconds: float
    artifact: str | None  # file name inside the entry folder
    deps: list[Dep] | None  # None: nvcc named no files it read, so the entry is not cached


@dataclass(frozen=True)
class DepRoots:
    """Where a compile's files live, to make dependency paths portable and to skip the ones
    the key already covers (the source) or that nvcc's version vouches for (the toolkit)."""

    source: Path
    cutlass: Path
    toolkit: tuple[Path, ...] = ()
    project: Path | None = None

    @functools.cached_property
    def _labelled(self) -> list[tuple[str, str]]:
        roots = [("<cutlass>", str(self.cutlass))]
        if self.project is not None:
            roots.append(("<project>", str(self.project)))
        return sorted(roots, key=lambda r: len(r[1]), reverse=True)  # innermost first

    def portable(self, path: str) -> str | None:
        """The recorded form of `path` (normalised, absolute), or None when it is not recorded."""
        if path == str(self.source):
            return None
        for label, root in self._labelled:
            if _is_under(path, root):
                return label + path[len(root.rstrip("/")) :]
        return None if any(_is_under(path, str(d)) for d in self.toolkit) else path

    def resolve(self, portable: str) -> str | None:
        """The file a recorded path names on this machine (None if it names nothing here)."""
        if portable.startswith("/"):
            return portable
        for label, root in self._labelled:
            if portable.startswith(label + "/"):
                return root.rstrip("/") + portable[len(label) :]
        return None


def _is_under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def compile_key(source: str, command: list[str], nvcc_version: str, environment: list[str]) -> str:
    h = hashlib.sha256()
    for part in (KEY_FORMAT, source, "\0".join(command), nvcc_version, "\0".join(environment)):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()


# --- dependencies ------------------------------------------------------------------------------


def parse_make_deps(text: str) -> list[str]:
    """The prerequisites of a make rule as nvcc writes it (`out : in1 \\` continued lines,
    spaces escaped with a backslash); the target is dropped."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    tokens = re.findall(r"(?:\\.|[^\s\\])+", text)
    names: list[str] = []
    seen_colon = False
    for token in tokens:
        if not seen_colon:
            seen_colon = token.endswith(":")
            continue
        if token.endswith(":"):  # another rule's target
            continue
        names.append(re.sub(r"\\(.)", r"\1", token).replace("$$", "$"))
    return names


def record_deps(deps_file: Path, cwd: Path, roots: DepRoots, started_ns: int) -> list[Dep] | None:
    """The files nvcc says it read, with their stat and hash; None when that cannot be known
    (no dependency file, a file gone or changed since the compile started)."""
    try:
        names = parse_make_deps(deps_file.read_text(encoding="utf-8", errors="surrogateescape"))
    except OSError:
        return None
    if not names:
        return None
    deps: dict[str, Dep] = {}
    for name in names:
        path = os.path.normpath(os.path.join(cwd, name))
        portable = roots.portable(path)
        if portable is None or portable in deps:
            continue
        try:
            st = os.stat(path)
            digest = _sha256_file(path)
        except OSError:
            return None
        if st.st_mtime_ns >= started_ns - RACE_MARGIN_NS:
            return None  # edited while nvcc ran: what it read is unknown
        deps[portable] = Dep(portable, st.st_mtime_ns, st.st_size, digest)
    return list(deps.values())


def validate_deps(deps: list[Dep], roots: DepRoots) -> list[Dep] | None:
    """`deps` with refreshed stats if every file still has the recorded content, else None.
    Unchanged mtime and size cost one stat; anything else re-hashes the file."""
    fresh: list[Dep] = []
    for dep in deps:
        path = roots.resolve(dep.path)
        if path is None:
            return None
        try:
            st = os.stat(path)
            if (st.st_mtime_ns, st.st_size) == (dep.mtime_ns, dep.size):
                fresh.append(dep)
                continue
            if st.st_size != dep.size or _sha256_file(path) != dep.sha256:
                return None
        except OSError:
            return None
        fresh.append(replace(dep, mtime_ns=st.st_mtime_ns))
    return fresh


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- entries on disk ---------------------------------------------------------------------------


def entry_from_json(data: Any) -> Entry | None:
    """An Entry if `data` has exactly the shape `put` writes, else None."""
    if not isinstance(data, dict) or set(data) != {f for f in Entry.__dataclass_fields__}:
        return None
    ok, code, log, seconds = data["ok"], data["returncode"], data["log"], data["seconds"]
    if not isinstance(ok, bool) or not _is_int(code) or not isinstance(log, str):
        return None
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    artifact = data["artifact"]
    if artifact is not None and not _is_plain_name(artifact):
        return None
    deps = data["deps"]
    if not isinstance(deps, list):
        return None
    parsed = [_dep_from_json(d) for d in deps]
    if any(d is None for d in parsed):
        return None
    return Entry(ok, code, log, float(seconds), artifact, [d for d in parsed if d is not None])


def _dep_from_json(data: Any) -> Dep | None:
    if not isinstance(data, dict) or set(data) != {"path", "mtime_ns", "size", "sha256"}:
        return None
    path, mtime, size, digest = data["path"], data["mtime_ns"], data["size"], data["sha256"]
    if not isinstance(path, str) or "\0" in path or not _is_int(mtime) or not _is_int(size):
        return None
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        return None
    return Dep(path, mtime, size, digest)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_plain_name(name: Any) -> bool:
    """A file name that stays in its folder: no separators, not `.`/`..`, not hidden."""
    return (
        isinstance(name, str)
        and bool(name)
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and not name.startswith(".")
    )


def _is_regular_file(path: Path) -> bool:
    """A plain file, not a symlink, a directory or a device."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _remove(path: Path) -> None:
    """Remove a file, a symlink (not its target) or a directory tree."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


class CompileCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_dir("compile")
        self._real_root = os.path.realpath(self.root)

    def folder(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str, roots: DepRoots) -> Entry | None:
        """The entry for `key` if it is well formed and every file it read is unchanged."""
        folder = self.folder(key)
        if not self._is_own_folder(folder) or not _is_regular_file(folder / RESULT):
            return None
        try:
            with open(folder / RESULT, "rb") as fh:
                entry = entry_from_json(json.loads(fh.read(MAX_RESULT_BYTES)))
        except (OSError, ValueError):
            return None
        if entry is None or entry.deps is None:
            return None
        if entry.artifact and not _is_regular_file(folder / entry.artifact):
            return None
        fresh = validate_deps(entry.deps, roots)
        if fresh is None:
            return None
        if fresh != entry.deps:  # same content, new stats: save the re-hash next time
            entry.deps = fresh
            self.put(key, entry)
        return entry

    def put(self, key: str, entry: Entry) -> None:
        if entry.deps is None:
            raise ValueError("an entry without dependencies cannot be validated: not cached")
        write_atomic(self.folder(key) / RESULT, json.dumps(asdict(entry)).encode())

    def reset(self, key: str) -> Path:
        """Empty the entry folder (keeping the lock) before nvcc writes into it: whatever was
        there, a symlink included, is removed, never written through."""
        folder = self._make_folder(key)
        for child in folder.iterdir():
            if child.name != LOCK:
                _remove(child)
        return folder

    @contextlib.contextmanager
    def lock(self, key: str, cancel: threading.Event | None = None) -> Iterator[Path]:
        """Held while compiling a key: a second process waits, then finds the entry. Waiting
        polls, so a set `cancel` ends the wait at once with CompileCancelled."""
        folder = self._make_folder(key)
        fd = _open_lock_file(folder / LOCK)
        try:
            _acquire(fd, cancel)
            try:
                yield folder
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _is_own_folder(self, folder: Path) -> bool:
        """The entry folder is a real directory inside the cache: no symlink on the way."""
        relative = folder.relative_to(self.root)
        return os.path.realpath(folder) == os.path.join(self._real_root, relative) and (
            folder.is_dir()
        )

    def _make_folder(self, key: str) -> Path:
        """The entry folder, replacing whatever non-directory (or symlink) sits in its place."""
        for path in (self.root / key[:2], self.folder(key)):
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                _remove(path)
            path.mkdir(parents=True, exist_ok=True)
        return self.folder(key)

    def info(self) -> tuple[int, int]:
        """(entries, bytes)."""
        entries = list(self.root.glob(f"*/*/{RESULT}"))
        size = sum(os.lstat(p).st_size for p in self.root.rglob("*") if _is_regular_file(p))
        return len(entries), size

    def clear(self) -> int:
        count, _ = self.info()
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        return count


def _open_lock_file(path: Path) -> int:
    """Open (creating) the lock file without following a symlink planted in its place."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR):
            raise
    _remove(path)
    return os.open(path, flags, 0o644)


def _acquire(fd: int, cancel: threading.Event | None) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if cancel is None:
            time.sleep(LOCK_POLL_S)
        elif cancel.wait(LOCK_POLL_S):
            raise CompileCancelled()
