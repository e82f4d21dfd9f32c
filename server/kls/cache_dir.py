"""Where kls keeps caches: $KLS_CACHE_DIR, else $XDG_CACHE_HOME/kls, else ~/.cache/kls."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Every folder kls writes under the cache root, by the name `kls cache` gives it.
CACHES = {
    "compile": "nvcc's results by content hash (kls.compile.cache)",
    "preamble": "the quick check's precompiled CUTLASS preambles (kls.compile.preamble)",
    "cutlass": "CUTLASS op lists and emitted ops per cutlass_library version",
    "torch-source": "torch wheels unpacked read-only to read Inductor's files (kls.upstream)",
    "cuda-headers": "the CUDA headers the quick check uses, unpacked from their wheel",
    "clang-standins": "clang's stand-in headers for CUDA built-ins (kls.compile.clang)",
    "quick": "the quick check's scratch folders",
}
# What kls writes beside a project's kls.toml, under .kls/.
PROJECT_CACHES = {
    "tune": "kls tune's measurements per instance (what --resume and the editor's lens read)",
    "bench": "kls bench's history per instance (the editor's 'vs last')",
}


def cache_root() -> Path:
    root = os.environ.get("KLS_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "kls" if xdg else Path.home() / ".cache" / "kls"


def cache_dir(*parts: str) -> Path:
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class CacheArea:
    name: str
    path: Path
    what: str


def caches(project: Path | None = None) -> list[CacheArea]:
    """Every cache kls writes: the user's (under cache_root()) and, for a project folder,
    its .kls/ ones. A folder under the root that kls does not name is listed too."""
    root = cache_root()
    out = [CacheArea(name, root / name, what) for name, what in CACHES.items()]
    if root.is_dir():
        out += [
            CacheArea(p.name, p, "not one kls names (an older kls?)")
            for p in sorted(root.iterdir())
            if p.is_dir() and p.name not in CACHES
        ]
    if project is not None:
        out += [
            CacheArea(name, project / ".kls" / name, what) for name, what in PROJECT_CACHES.items()
        ]
    return out


def usage(path: Path) -> tuple[int, int]:
    """(files, bytes) under `path`; symlinks are counted, never followed."""
    files = size = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            files += 1
            size += info.st_size if stat.S_ISREG(info.st_mode) else 0
    return files, size


def clear_cache(path: Path) -> None:
    """Remove `path` and everything under it, read-only folders included (an unpacked torch
    source is made read-only)."""

    if path.is_dir() and not path.is_symlink():
        for folder, _, _ in os.walk(path):
            os.chmod(folder, 0o700)
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
