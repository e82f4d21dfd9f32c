"""nvcc command lines: `check` (front end only) and `build` (Inductor's shared-library flags)."""

from __future__ import annotations

from pathlib import Path

from kls.compile.toolchain import Toolchain

MODES = ("check", "build")
COMMON = [
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-DNDEBUG",  # without it ptxas serialises wgmma (measured with nvcc 13.0 on an H200)
    "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1",
]


def normalize_arch(arch: str) -> str:
    """Inductor builds arch 90 as 90a (wgmma and TMA need the 'a' features)."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return "90a" if digits == "90" else arch


def nvcc_command(
    tc: Toolchain,
    mode: str,
    arch: str,
    source: Path,
    output: Path,
    opt_level: str = "-O1",
    extra: tuple[str, ...] = (),
    project_dir: Path | None = None,
    deps: Path | None = None,
) -> list[str]:
    """`project_dir` (the template's folder) comes first on the include path, so
    `#include "x.cuh"` finds the header next to the template; nvcc writes the files the compile
    read to `deps` (make syntax), which the cache checks on every hit."""
    arch = normalize_arch(arch)
    dirs = ([project_dir] if project_dir is not None else []) + tc.include_dirs()
    includes = [f"-I{d}" for d in dirs]
    if deps is not None:
        includes += ["-MD", "-MF", str(deps)]
    if mode == "check":
        return [
            tc.nvcc,
            "-fdevice-syntax-only",
            "--ptx",
            f"-gencode=arch=compute_{arch},code=sm_{arch}",
            *COMMON,
            *includes,
            *extra,
            str(source),
            "-o",
            str(output),
        ]
    return [
        tc.nvcc,
        "-t=0",
        "-w",
        f"-gencode=arch=compute_{arch},code=[sm_{arch},compute_{arch}]",
        opt_level,
        *COMMON,
        "-Xcompiler=-fPIC",
        "-Xcompiler=-fno-strict-aliasing",
        "-Xcompiler",
        "-fvisibility=hidden",
        *includes,
        "-shared",
        *extra,
        str(source),
        "-o",
        str(output),
    ]
