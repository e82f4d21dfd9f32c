"""The project boundary: the folders a config's templates (and their includes) may be read from.

The project root is the folder holding kls.toml (or pyproject.toml), after resolving symlinks.
A path is inside when its real path (every symlink resolved) lies under the root or under one
of the extra roots a user names (`kls.extraRoots`, `--extra-root`). Anything else is refused
before it is opened, so a checked-in config or template cannot make kls read `/etc/passwd` or
`~/.ssh` and echo its lines back in diagnostics.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import jinja2
from jinja2.loaders import split_template_path

from kls.input_limits import MAX_TEMPLATE_BYTES


def project_roots(config: Path, extra_roots: Iterable[str | Path] = ()) -> tuple[Path, ...]:
    """The real folders that `config`'s templates may live in: its own folder first."""
    roots = [config.resolve().parent]
    for extra in extra_roots:
        folder = Path(extra).expanduser().resolve()
        if folder not in roots:
            roots.append(folder)
    return tuple(roots)


def is_inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether `path`, with every symlink resolved, lies under one of `roots`."""
    real = path.resolve()
    return any(real == root or real.is_relative_to(root) for root in roots)


def describe_roots(roots: Sequence[Path]) -> str:
    """`roots` as people read them: the project root, then any extra roots."""
    if len(roots) <= 1:
        return f"the project root {roots[0]}" if roots else "the project root"
    extra = ", ".join(str(r) for r in roots[1:])
    return f"the project root {roots[0]} or the extra roots {extra}"


class TemplateOutsideProject(jinja2.TemplateNotFound):
    """An include whose real path leaves the project: refused before it is read."""


def read_inside(path: Path, roots: Sequence[Path], name: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of `path`, which must be a regular file whose real path lies
    under `roots` (else TemplateOutsideProject, with `name` in its message).

    The file is opened first and the check is about what was opened (its real path as the
    kernel knows it, /proc/self/fd, or else a resolved path whose inode must be the opened
    one), so a symlink swapped in between the check and the read cannot be read: the check
    and the read are about one object. (Resolving, then reading, let a folder swapped for a
    symlink in between be read; and `Path.resolve` itself raises EINVAL when a symlink is
    replaced between its lstat and its readlink: the "[Errno 22] Invalid argument" seen.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO must not block
    except OSError as exc:
        raise OSError(f"cannot open {path}: {exc.strerror}") from None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise OSError(f"{path} is not a regular file")
        real = _opened_path(fd, path, opened)
        if not is_inside(real, roots):
            raise TemplateOutsideProject(
                name,
                f"{name} resolves to {real}, outside {describe_roots(roots)}; keep templates "
                "inside the project (or add their folder to kls.extraRoots / --extra-root)",
            )
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _opened_path(fd: int, path: Path, opened: os.stat_result) -> Path:
    """The real path of the file open at `fd`."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
    try:
        real = Path(os.path.realpath(path))
        now = os.stat(real)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        raise OSError(f"{path} changed while kls read it (a file or symlink was replaced)")
    return real


class ConfinedFileSystemLoader(jinja2.FileSystemLoader):
    """Jinja's FileSystemLoader (which already refuses `..` segments and keeps absolute names
    under the search path) that also refuses a file whose real path leaves `roots`, i.e. a
    symlink pointing out of the project, and a file larger than MAX_TEMPLATE_BYTES."""

    def __init__(self, searchpath: str | Path, roots: Sequence[Path]) -> None:
        super().__init__(str(searchpath))
        self.roots = tuple(Path(r).resolve() for r in roots)

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        filename = self._find(template)
        data = read_inside(Path(filename), self.roots, f"include '{template}'", MAX_TEMPLATE_BYTES)
        if len(data) > MAX_TEMPLATE_BYTES:
            raise jinja2.TemplateNotFound(
                template,
                f"include '{template}' is larger than {MAX_TEMPLATE_BYTES // 1024} KiB, "
                "the most kls reads; split it",
            )
        contents = data.decode(self.encoding)
        real = Path(filename)
        try:
            mtime = real.stat().st_mtime
        except OSError:
            mtime = -1.0

        def uptodate() -> bool:
            try:
                return real.stat().st_mtime == mtime
            except OSError:
                return False

        return contents, os.path.normpath(filename), uptodate

    def _find(self, template: str) -> str:
        pieces = split_template_path(template)  # raises TemplateNotFound on `..`
        for searchpath in self.searchpath:
            filename = posixpath.join(searchpath, *pieces)
            if os.path.isfile(filename):
                return filename
        raise jinja2.TemplateNotFound(
            template, f"{template!r} not found in {', '.join(self.searchpath)}"
        )
