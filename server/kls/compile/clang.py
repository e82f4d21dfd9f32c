"""clang for the quick tier: find it, read its version, and build its CUDA host-side commands.

The quick tier runs `clang++ -x cuda --cuda-host-only -fsyntax-only` over the rendered file:
the C++ front end on the host side of the translation unit, which is where almost every
template mistake shows (syntax, types, member names, template arguments). clang's CUDA support
lags the toolkit, so with CUDA 13 it needs a few things nvcc's own front end does not:

- `-Wno-unknown-cuda-version` (clang 19 knows CUDA up to 12.x);
- `-I<cuda>/include/cccl`: CUDA 13 moved `cuda/std/...` there;
- `-D__CUDACC_VER_MAJOR__/MINOR__` from nvcc's version: CUTLASS's SM90 collective builders
  static-assert "Unsupported Toolkit" without them;
- stand-ins for headers that clang's CUDA wrapper includes and CUDA 13 no longer ships
  (`texture_fetch_functions.h`, and `curand_mtgp32_kernel.h` when no cuRAND is installed):
  empty files in a kls-owned folder searched *after* every real include folder (`-idirafter`),
  so a toolkit that has them wins.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kls.cache_dir import cache_dir
from kls.compile.command import COMMON, normalize_arch
from kls.compile.toolchain import Toolchain

# Searched in this order when no clang is set (kls.clangPath / --clang).
CANDIDATES = ("clang++-19", "clang++")
MIN_CLANG_MAJOR = 17  # sm_90a and C++17 CUDA host parsing of CUTLASS 4 (19 is what is tested)
# Headers clang's __clang_cuda_runtime_wrapper.h includes that CUDA 13 dropped (or that come
# with cuRAND, which a trimmed toolkit lacks).
WRAPPER_HEADERS = ("texture_fetch_functions.h", "curand_mtgp32_kernel.h")
STANDIN_TEXT = "// kls: an empty stand-in for a header clang's CUDA wrapper includes\n"
ERROR_LIMIT = 20
# nvcc flags that mean the same to clang (the rest of COMMON is nvcc-only).
SHARED_FLAGS = tuple(f for f in COMMON if f.startswith(("-D", "-std=")))
INSTALL_HINT = "install clang 19 (apt-get install clang-19) or set kls.clangPath / --clang"


class ClangUnavailable(Exception):
    """No usable clang; the message says why and what to do (the quick tier is skipped)."""


@dataclass(frozen=True)
class Clang:
    path: str  # absolute
    version: str  # e.g. "19.1.7"
    resource_dir: str  # its builtin headers: part of the preamble key


def find_clang(setting: str | None = None) -> Clang:
    """The clang named by the setting, else the first of CANDIDATES on PATH."""
    names = [setting] if setting else list(CANDIDATES)
    for name in names:
        path = shutil.which(name) if os.sep not in name else name
        if path is None or not os.path.isfile(path) or not os.access(path, os.X_OK):
            continue
        path = os.path.abspath(path)
        version, resource = _clang_info(path, os.stat(path).st_mtime_ns)
        if version is None:
            raise ClangUnavailable(f"'{path}' does not look like clang: {INSTALL_HINT}")
        if int(version.split(".")[0]) < MIN_CLANG_MAJOR:
            raise ClangUnavailable(
                f"clang {version} at {path} is too old for CUDA 13 and CUTLASS 4 "
                f"(need {MIN_CLANG_MAJOR} or newer): {INSTALL_HINT}"
            )
        return Clang(path, version, resource)
    if setting:
        raise ClangUnavailable(f"clang not found ('{setting}'): {INSTALL_HINT}")
    raise ClangUnavailable(f"clang not found on PATH ({', '.join(CANDIDATES)}): {INSTALL_HINT}")


@functools.lru_cache(maxsize=8)
def _clang_info(path: str, mtime_ns: int) -> tuple[str | None, str]:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
        resource = subprocess.run(
            [path, "-print-resource-dir"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    match = re.search(r"clang version (\d+\.\d+\.\d+)", out)
    return (match.group(1) if match else None), resource


STANDIN_MTIME_NS = 946_684_800 * 10**9  # 2000-01-01


def standin_dir() -> Path:
    """A kls-owned folder with empty stand-ins for the wrapper's headers this toolkit lacks."""
    folder = cache_dir("clang-standins")
    for name in WRAPPER_HEADERS:
        target = folder / name
        if not target.is_file() or target.read_text(encoding="utf-8") != STANDIN_TEXT:
            target.unlink(missing_ok=True)
            target.write_text(STANDIN_TEXT, encoding="utf-8")
            # Constant content, so a fixed old mtime: a compile that starts right after they
            # are written must not take them for files edited during it (and skip caching).
            os.utime(target, ns=(STANDIN_MTIME_NS, STANDIN_MTIME_NS))
    return folder


def cuda_version_defines(nvcc_version: str) -> list[str]:
    parts = (nvcc_version.split(".") + ["0", "0"])[:2]
    return [f"-D__CUDACC_VER_MAJOR__={parts[0]}", f"-D__CUDACC_VER_MINOR__={parts[1]}"]


def clang_flags(
    tc: Toolchain,
    arch: str,
    project_dir: Path | None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """Every flag of a quick-tier run but the action and the files (the same for building the
    preamble and checking against it: clang refuses a PCH made with other options)."""
    if tc.toolkit_root is None:
        raise ClangUnavailable(
            "the CUDA toolkit nvcc runs from was not found (nvcc -dryrun printed no TOP): "
            "clang needs --cuda-path"
        )
    toolkit = tc.toolkit_root
    dirs = ([project_dir] if project_dir is not None else []) + tc.include_dirs()
    cccl = toolkit / "include" / "cccl"
    return [
        "-x",
        "cuda",
        "--cuda-host-only",
        f"--cuda-path={toolkit}",
        f"--cuda-gpu-arch=sm_{normalize_arch(arch)}",
        "-Wno-unknown-cuda-version",
        *([f"-I{cccl}"] if cccl.is_dir() else []),
        *cuda_version_defines(tc.nvcc_version),
        *SHARED_FLAGS,
        *[f"-I{d}" for d in dirs],
        *[f for f in extra if f.startswith(("-D", "-U", "-I"))],
        "-idirafter",
        str(standin_dir()),
        "-w",  # errors only: nvcc's verdict owns warnings
        f"-ferror-limit={ERROR_LIMIT}",
        "-fno-color-diagnostics",
        "-fno-caret-diagnostics",
        "-fno-diagnostics-show-option",
    ]


def pch_command(
    clang: Clang,
    flags: list[str],
    source: Path,
    output: Path,
    deps: Path | None,
    base: Path | None = None,
) -> list[str]:
    """Build a precompiled header of `source` (templates used in it instantiated into it);
    with `base`, a PCH chained on that one (which must stay where it is to be used)."""
    dep_flags = ["-MD", "-MF", str(deps)] if deps is not None else []
    return [
        clang.path,
        *flags,
        "-c",
        "-Xclang",
        "-emit-pch",
        "-fpch-instantiate-templates",
        *(["-include-pch", str(base)] if base is not None else []),
        *dep_flags,
        str(source),
        "-o",
        str(output),
    ]


def check_command(clang: Clang, flags: list[str], source: Path, pch: Path | None) -> list[str]:
    """The syntax check of `source`, against a precompiled preamble when there is one. The
    preamble's files are trusted by content: a header touched but unchanged keeps the PCH."""
    with_pch = ["-include-pch", str(pch), "-fpch-validate-input-files-content"] if pch else []
    return [clang.path, *flags, "-fsyntax-only", *with_pch, str(source)]
