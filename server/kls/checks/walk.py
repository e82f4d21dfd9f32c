"""What `kls check DIR` reads below DIR: templates and every config, skipping folders that are
not the project's own (virtual environments, node_modules, kls's own .kls, hidden folders and
those git ignores)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kls.instances.load import is_config

SKIPPED = frozenset({".venv", "venv", "node_modules", ".kls", "__pycache__", "site-packages"})
GIT_TIMEOUT_S = 10.0


@dataclass
class ProjectFiles:
    templates: list[Path] = field(default_factory=list)
    configs: list[Path] = field(default_factory=list)  # kls.toml, or pyproject.toml with [tool.kls]


def project_files(root: Path, is_template: Callable[[Path], bool]) -> ProjectFiles:
    """Templates (`is_template(path)`) and configs below `root`, in path order."""
    ignored = _git_ignored(root)
    found = ProjectFiles()
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIPPED and not d.startswith(".") and (here / d).resolve() not in ignored
        )
        for name in sorted(files):
            path = here / name
            if is_config(path):
                found.configs.append(path.resolve())
            if is_template(path):
                found.templates.append(path)
    return found


def _git_ignored(root: Path) -> set[Path]:
    """The folders git ignores below `root` (none when `root` is not in a git work tree or
    git is missing)."""
    try:
        proc = subprocess.run(
            ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"],
            cwd=root,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if proc.returncode != 0:
        return set()
    entries = proc.stdout.decode("utf-8", errors="replace").split("\0")
    return {(root / e.rstrip("/")).resolve() for e in entries if e.endswith("/")}
