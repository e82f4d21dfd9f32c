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
    """An include whose real path leaves the project: refused before it is opened."""


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
        real = Path(filename).resolve()
        if not is_inside(real, self.roots):
            raise TemplateOutsideProject(
                template,
                f"include '{template}' resolves to {real}, outside {describe_roots(self.roots)}; "
                "keep included templates inside the project (or add their folder to "
                "kls.extraRoots / --extra-root)",
            )
        if real.stat().st_size > MAX_TEMPLATE_BYTES:
            raise jinja2.TemplateNotFound(
                template,
                f"include '{template}' is larger than {MAX_TEMPLATE_BYTES // 1024} KiB, "
                "the most kls reads; split it",
            )
        contents = real.read_text(encoding=self.encoding)
        mtime = real.stat().st_mtime

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
