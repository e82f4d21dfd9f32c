"""Compile figures for every shipped instance: cold check, cold build, cache hit, and kls's
overhead over running the same nvcc command by hand.

Usage: .venv/bin/python benchmarks/compile_speed.py [--instances a,b] [--modes check,build]
Each instance is compiled with an empty cache (a new temporary KLS cache), then the exact
command kls ran is re-run bare with subprocess in a fresh folder, then kls is asked again
(cache hit, median of 20 in-process calls).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from kls.compile import CompileOptions, compile_instance
from kls.compile.cache import CompileCache
from kls.compile.toolchain import find_toolchain
from kls.instances import load_instances

ROOT = Path(__file__).resolve().parent.parent


def bare_nvcc(command: list[str], source: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="kls-bare-") as tmp:
        src = Path(tmp) / source.name
        shutil.copyfile(source, src)
        cmd = [str(src) if c == str(source) else c for c in command]
        cmd[cmd.index("-o") + 1] = str(Path(tmp) / "out")
        start = time.perf_counter()
        subprocess.run(cmd, cwd=tmp, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", default="")
    parser.add_argument("--modes", default="check,build")
    args = parser.parse_args()
    instances = load_instances(ROOT / "templates" / "kls.toml").instances
    names = [n for n in args.instances.split(",") if n] or sorted(instances)
    tc = find_toolchain()
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores; nvcc "
        f"{tc.nvcc_version}; nvidia-cutlass {tc.cutlass_version}; {time.strftime('%Y-%m-%d')}"
    )
    print("| instance | mode | kls cold | bare nvcc | overhead | cache hit (median of 20) |")
    print("|---|---|---|---|---|---|")
    for name in names:
        for mode in args.modes.split(","):
            cache = CompileCache(Path(tempfile.mkdtemp(prefix="kls-bench-cache-")))
            options = CompileOptions(mode=mode)
            start = time.perf_counter()
            result = compile_instance(instances[name], options, cache=cache)
            cold = time.perf_counter() - start
            assert result.ok, result.log[-3000:]
            source = cache.folder(result.key or "") / "kernel.cu"
            bare = bare_nvcc(result.command, source)
            hits = []
            for _ in range(20):
                t0 = time.perf_counter()
                again = compile_instance(instances[name], options, cache=cache)
                hits.append(time.perf_counter() - t0)
                assert again.cached
            overhead = (cold - bare) / bare * 100
            print(
                f"| {name} | {mode} | {cold:.2f} s | {bare:.2f} s | {overhead:+.1f} % | "
                f"{statistics.median(hits) * 1000:.1f} ms |",
                flush=True,
            )
            shutil.rmtree(cache.root, ignore_errors=True)


if __name__ == "__main__":
    main()
