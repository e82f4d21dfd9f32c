"""Where kls keeps caches: $KLS_CACHE_DIR, else $XDG_CACHE_HOME/kls, else ~/.cache/kls."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = os.environ.get("KLS_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = Path(xdg) / "kls" if xdg else Path.home() / ".cache" / "kls"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


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
