"""Find nvcc and the CUTLASS headers, and read their versions (they are part of cache keys)."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from kls.cache_dir import cache_dir
from kls.cutlass.ops import cutlass_version

MIN_CUDA_MAJOR = 12


class ToolchainError(Exception):
    """nvcc or the CUTLASS headers are missing or unusable; the message says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# Environment variables that change what nvcc (or the host compiler it drives) does: nvcc reads
# the NVCC_* ones itself (CUDA 12/13 `strings nvcc`), nvcc.profile names INCLUDES, LIBRARIES,
# CUDAFE_FLAGS and PTXAS_FLAGS, and gcc reads the include/prefix ones. All are in the cache key.
NVCC_ENVIRONMENT = (
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
    "INCLUDES",
    "LIBRARIES",
    "CUDAFE_FLAGS",
    "PTXAS_FLAGS",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "LIBRARY_PATH",
)


@dataclass(frozen=True)
class Toolchain:
    nvcc: str  # an absolute path: nvcc runs from the cache folder
    nvcc_version: str
    cutlass_root: Path
    cutlass_version: str
    toolkit_root: Path | None = None  # the CUDA toolkit nvcc runs from (its TOP)
    # Headers CUTLASS needs that this toolkit lacks (cuRAND, from the nvidia-curand wheel).
    extra_include: Path | None = None

    def include_dirs(self) -> list[Path]:
        root = self.cutlass_root
        dirs = [root / "include", root / "tools" / "util" / "include"]
        return dirs + ([self.extra_include] if self.extra_include is not None else [])

    def toolkit_headers(self) -> list[Path]:
        """The header folders of the CUDA toolkit nvcc runs from: trusted by nvcc's version,
        so a cache hit does not stat them. Only a real toolkit (bin/nvcc.profile) counts: an
        nvcc wrapper in ~/bin must not make all of ~ trusted."""
        root = self.toolkit_root
        if root is None or not (root / "bin" / "nvcc.profile").is_file():
            return []
        return [root / "targets", root / "include", root / "nvvm"]


def nvcc_environment() -> list[str]:
    """What in this process's environment changes nvcc's result: the variables it honours and
    the host compiler it picks from PATH (`gcc`; its real path names the version)."""
    found = [f"{name}={os.environ[name]}" for name in NVCC_ENVIRONMENT if name in os.environ]
    gcc = shutil.which("gcc")
    found.append(f"gcc={os.path.realpath(gcc) if gcc else '-'}")
    return found


def find_toolchain(nvcc_path: str = "nvcc", cutlass_include: str | None = None) -> Toolchain:
    nvcc = shutil.which(nvcc_path) if os.sep not in nvcc_path else nvcc_path
    if nvcc is None or not Path(nvcc).is_file():
        raise ToolchainError(
            "KT604",
            f"nvcc not found ('{nvcc_path}'): install the CUDA toolkit, put nvcc on PATH, or set "
            "kls.nvccPath / --nvcc",
        )
    nvcc = os.path.abspath(nvcc)  # checked here, run from the cache folder
    if not os.access(nvcc, os.X_OK):
        raise ToolchainError(
            "KT604", f"'{nvcc}' is not executable: chmod +x it or set kls.nvccPath / --nvcc"
        )
    mtime = Path(nvcc).stat().st_mtime
    version = _nvcc_version(nvcc, mtime)
    if int(version.split(".")[0]) < MIN_CUDA_MAJOR:
        raise ToolchainError(
            "KT604",
            f"nvcc {version} at {nvcc} is too old: CUTLASS 4 and SM90 need CUDA "
            f"{MIN_CUDA_MAJOR} or newer; install a newer toolkit or set kls.nvccPath",
        )
    root = Path(cutlass_include) if cutlass_include else _cutlass_root()
    if root is None or not (root / "include" / "cutlass" / "cutlass.h").is_file():
        raise ToolchainError(
            "KT605",
            "CUTLASS headers not found: install nvidia-cutlass (pip install nvidia-cutlass) or "
            "set kls.cutlassInclude to a CUTLASS checkout",
        )
    toolkit = _toolkit_root(nvcc, mtime)
    return Toolchain(nvcc, version, root, cutlass_version(), toolkit, _missing_headers(toolkit))


def _missing_headers(toolkit: Path | None) -> Path | None:
    """A folder with the cuRAND headers when the toolkit has none (a trimmed CUDA install):
    CUTLASS's `util/reference/device/tensor_fill.h`, which torch 2.11's GEMM template includes,
    needs `curand_kernel.h`. The folder holds links to the nvidia-curand wheel's `curand*.h`
    only, so no other header of the wheel can shadow the toolkit's."""
    if toolkit is None or any(toolkit.glob("targets/*/include/curand_kernel.h")):
        return None
    if (toolkit / "include" / "curand_kernel.h").is_file():
        return None
    wheel = _curand_wheel_include()
    if wheel is None:
        return None
    folder = cache_dir("cuda-headers", wheel.parent.name)
    for header in sorted(wheel.glob("curand*.h")):
        link = folder / header.name
        if not link.is_symlink() or link.resolve() != header.resolve():
            # Atomic: another process (or thread) may be making the same link.
            temporary = folder / f".{header.name}.{os.getpid()}.{threading.get_ident()}"
            temporary.unlink(missing_ok=True)
            temporary.symlink_to(header)
            os.replace(temporary, link)
    return folder


def _curand_wheel_include() -> Path | None:
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for include in sorted(Path(base).glob("cu*/include"), reverse=True):
            if (include / "curand_kernel.h").is_file():
                return include
    return None


def _cutlass_root() -> Path | None:
    """The headers shipped in the nvidia-cutlass wheel, found without importing it (~25 ms)."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "source"


@functools.lru_cache(maxsize=8)
def _nvcc_version(nvcc: str, mtime: float) -> str:
    try:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError("KT604", f"cannot run '{nvcc} --version': {exc}") from exc
    match = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    if match is None:
        first = out.strip().splitlines()[0][:120] if out.strip() else "nothing"
        raise ToolchainError(
            "KT604", f"'{nvcc}' does not look like nvcc (`--version` printed: {first})"
        )
    return match.group(2)


@functools.lru_cache(maxsize=8)
def _toolkit_root(nvcc: str, mtime: float) -> Path | None:
    """Where nvcc really lives (`nvcc` is often a wrapper script): its dry run prints TOP."""
    try:
        out = subprocess.run(
            [nvcc, "-dryrun", "-E", "-x", "cu", os.devnull],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.MULTILINE)
    return Path(os.path.realpath(match.group(1).strip())) if match else None
