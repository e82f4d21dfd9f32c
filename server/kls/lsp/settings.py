"""Client settings (`workspace/configuration`, section "kls")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kls.sandbox.workers import (
    DEFAULT_MEMORY_MB,
    DEFAULT_SECONDS,
    EDITOR_MEMORY_MB_RANGE,
    EDITOR_SECONDS_RANGE,
    WorkerLimits,
)

# Each setting's name in the client's "kls" section (package.json: `kls.<name>`).
CLIENT_KEYS = {
    "instances_file": "instancesFile",
    "active_instance": "activeInstance",
    "nvcc_path": "nvccPath",
    "clang_path": "clangPath",
    "arch": "arch",
    "compile_on_save": "compileOnSave",
    "cutlass_include": "cutlassInclude",
    "extra_roots": "extraRoots",
    "render_timeout_s": "renderTimeout",
    "render_memory_mb": "renderMemoryMB",
    "torch_source": "torchSource",
    "torch_python": "torchPython",
}
# What the extension adds that is no user setting: whether VS Code trusts the workspace.
EXTENSION_KEYS = {"workspace_trusted": "workspaceTrusted"}


@dataclass
class Settings:
    instances_file: str | None = None  # a kls.toml to use instead of the nearest one
    active_instance: str | None = None  # default active instance for every template
    nvcc_path: str = "nvcc"
    arch: str | None = None  # override the instances' arch for compiles
    compile_on_save: bool = True
    cutlass_include: str | None = None
    # Folders outside the project (the folder of kls.toml) that templates may be read from.
    extra_roots: tuple[str, ...] = ()
    # The render sandbox's bounds (kls.sandbox.workers): a render's deadline and memory.
    render_timeout_s: float = DEFAULT_SECONDS
    render_memory_mb: int = DEFAULT_MEMORY_MB
    clang_path: str | None = None  # the quick tier's clang; None: clang++-19, clang++ on PATH
    # Where Inductor's files are read from (kls.upstream), before KLS_TORCH_SOURCE.
    torch_source: str | None = None
    # The Python that runs the torch worker (Inductor's render of Triton templates); used in a
    # trusted workspace only (kls.profiles.triton.client.use_torch_python).
    torch_python: str | None = None
    # False in a workspace the editor does not trust: kls.toml's [torch] source is ignored.
    workspace_trusted: bool = True

    @staticmethod
    def from_client(raw: Any) -> Settings:
        """Read what the client sent; wrong types fall back to defaults (never raise)."""
        if not isinstance(raw, dict):
            return Settings()

        def text(key: str) -> str | None:
            value = raw.get(key)
            return value if isinstance(value, str) and value else None

        compile_on_save = raw.get("compileOnSave", True)
        trusted = raw.get("workspaceTrusted", True)
        return Settings(
            instances_file=text("instancesFile"),
            active_instance=text("activeInstance"),
            nvcc_path=text("nvccPath") or "nvcc",
            clang_path=text("clangPath"),
            arch=text("arch"),
            compile_on_save=compile_on_save if isinstance(compile_on_save, bool) else True,
            cutlass_include=text("cutlassInclude"),
            extra_roots=_folders(raw.get("extraRoots")),
            render_timeout_s=_number(raw.get("renderTimeout"), EDITOR_SECONDS_RANGE)
            or DEFAULT_SECONDS,
            render_memory_mb=int(
                _number(raw.get("renderMemoryMB"), EDITOR_MEMORY_MB_RANGE) or DEFAULT_MEMORY_MB
            ),
            torch_source=text("torchSource"),
            torch_python=text("torchPython"),
            workspace_trusted=trusted if isinstance(trusted, bool) else False,
        )

    def worker_limits(self) -> WorkerLimits:
        return WorkerLimits(memory_mb=self.render_memory_mb, seconds=self.render_timeout_s)


def _number(value: Any, bounds: tuple[float, float]) -> float | None:
    """A number within `bounds`, else None (the default applies)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if bounds[0] <= value <= bounds[1] else None


def _folders(value: Any) -> tuple[str, ...]:
    """A list of folder names; anything that is not a non-empty string is dropped."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str) and v)
