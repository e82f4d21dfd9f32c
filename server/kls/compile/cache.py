"""The compile cache: content-addressed entries, atomic writes, one nvcc per key across processes.

Key = sha256 of (rendered source, full command with paths neutralised, nvcc version, CUTLASS
version). An entry holds the result (ok or the failure with its log) and, for builds, the
library; failures are cached too, so re-saving an unchanged broken template costs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from kls.cache_dir import cache_dir, write_atomic


@dataclass
class Entry:
    ok: bool
    returncode: int
    log: str
    seconds: float
    artifact: str | None  # file name inside the entry folder


def compile_key(source: str, command: list[str], nvcc_version: str, cutlass: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(command), nvcc_version, cutlass):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()


class CompileCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_dir("compile")

    def folder(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> Entry | None:
        try:
            data = json.loads((self.folder(key) / "result.json").read_text())
            entry = Entry(**data)
        except (OSError, ValueError, TypeError):
            return None
        if entry.artifact and not (self.folder(key) / entry.artifact).is_file():
            return None
        return entry

    def put(self, key: str, entry: Entry) -> None:
        write_atomic(self.folder(key) / "result.json", json.dumps(asdict(entry)).encode())

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Held while compiling a key: a second process waits, then finds the entry."""
        folder = self.folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def info(self) -> tuple[int, int]:
        """(entries, bytes)."""
        entries = list(self.root.glob("*/*/result.json"))
        size = sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())
        return len(entries), size

    def clear(self) -> int:
        count, _ = self.info()
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        return count
