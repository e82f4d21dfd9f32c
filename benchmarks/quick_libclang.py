"""libclang (the `libclang` wheel, reparse in a long-lived worker) against the clang subprocess
that the quick tier runs, on one rendered instance with a small edit per save.

    python benchmarks/quick_libclang.py templates/kls.toml sm90_bf16_8192 [--reps 7]

Needs clang (the subprocess and its resource headers) and, for the libclang rows, the wheel:
`pip install libclang` (or `--libclang-path DIR`, a folder holding its `clang` package). Prints
one row per way: the median and worst of `reps` saves, each a new body text, in seconds of
wall-clock time, plus the one-off setup (preamble / first parse).

- subprocess: what kls runs: `clang++ -fsyntax-only -include-pch` over the body, per save.
- libclang + PCH: a worker process keeps an Index, parses the body against a PCH that libclang
  itself built from the same preamble text (clang refuses another version's PCH), then
  `reparse(unsaved_files=...)` per save.
- libclang preamble: clangd's way: PARSE_PRECOMPILED_PREAMBLE on the whole file (libclang
  precompiles the leading `#include` block on its own), then reparse per save.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kls.compile.clang import check_command, clang_flags, find_clang
from kls.compile.preamble import PreambleStore, warmup
from kls.compile.quick import _Quick
from kls.compile.run import CompileOptions, CompileResult
from kls.compile.toolchain import find_toolchain
from kls.instances import load_instances


def _edit(body: str, i: int) -> str:
    """Save number i: a comment changed at the end (a new text every time, same meaning)."""
    return body + f"\n// save {i}\n"


def _libclang_worker(conn: Any, path: str | None, flags: list[str], work: str) -> None:
    if path:
        sys.path.insert(0, path)
    from clang import cindex  # type: ignore[import-not-found]

    index = cindex.Index.create()
    tu = None
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, name, text, extra = msg
        started = time.monotonic()
        unsaved = [(name, text)]
        if kind == "pch":  # build a PCH from text, save it to extra
            opts = cindex.TranslationUnit.PARSE_INCOMPLETE
            args = [*flags, "-Xclang", "-fpch-instantiate-templates"]
            pre = index.parse(name, args=args, unsaved_files=unsaved, options=opts)
            errors = [str(d) for d in pre.diagnostics if d.severity >= 3][:1]
            pre.save(extra)
        elif kind in ("parse", "preamble"):
            opts = cindex.TranslationUnit.PARSE_PRECOMPILED_PREAMBLE if kind == "preamble" else 0
            args = [*flags, *(["-include-pch", extra] if extra else [])]
            tu = index.parse(name, args=args, unsaved_files=unsaved, options=opts)
            errors = [str(d) for d in tu.diagnostics if d.severity >= 3][:1]
        else:
            assert tu is not None
            tu.reparse(unsaved_files=unsaved)
            errors = [str(d) for d in tu.diagnostics if d.severity >= 3][:1]
        conn.send((time.monotonic() - started, errors))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", type=Path)
    ap.add_argument("instance")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--libclang-path", help="folder holding the wheel's `clang` package")
    args = ap.parse_args()
    spec = load_instances(args.config).instances[args.instance]
    options = CompileOptions()
    result = CompileResult(spec.name, "quick", ok=True)
    quick = _Quick.prepare(spec, options, None, result, PreambleStore())
    if quick is None or quick.parts is None or quick.key is None:
        print(f"cannot run the quick tier: {result.notice}")
        return 1
    clang = find_clang()
    tc = find_toolchain()
    flags = clang_flags(tc, spec.arch, quick.project)
    started = time.monotonic()
    preamble = quick.store.lookup(quick.key, quick.roots()) or quick._build(None, False)
    setup = time.monotonic() - started
    assert preamble.pch is not None
    rows: list[tuple[str, float, list[float], list[str]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        body_path = Path(tmp) / "kernel.cu"
        times = []
        for i in range(args.reps):
            body_path.write_text(_edit(quick.parts.body, i))
            t = time.monotonic()
            out = subprocess.run(
                check_command(clang, flags, body_path, preamble.pch),
                capture_output=True,
                text=True,
                check=False,
            )
            times.append(time.monotonic() - t)
        errors = [ln for ln in out.stdout.splitlines() if " error: " in ln][:1]
        rows.append(("subprocess clang + PCH", setup, times, errors))

        ctx = mp.get_context("spawn")
        lib_flags = [*flags, f"-resource-dir={clang.resource_dir}"]
        for way in ("libclang + PCH", "libclang preamble (clangd)"):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_libclang_worker, args=(child, args.libclang_path, lib_flags, tmp)
            )
            proc.start()
            try:
                name = str(body_path)
                if way == "libclang + PCH":
                    pch = str(Path(tmp) / "lib.pch")
                    text = quick.parts.preamble + warmup(quick.parts.rest)
                    parent.send(("pch", str(Path(tmp) / "pre.cu"), text, pch))
                    t_pch, pre_errors = parent.recv()
                    parent.send(("parse", name, quick.parts.body, pch))
                    t_parse, _ = parent.recv()
                    setup_s = t_pch + t_parse
                    if pre_errors:
                        print(f"{way}: the preamble fails under libclang: {pre_errors[0]}")
                else:
                    parent.send(("preamble", name, quick.text, None))
                    t_parse, _ = parent.recv()
                    parent.send(("reparse", name, quick.text, None))  # builds the preamble
                    t_first, _ = parent.recv()
                    setup_s = t_parse + t_first
                    quick_text = quick.text
                times = []
                errors = []
                for i in range(args.reps):
                    text = _edit(quick.parts.body if way == "libclang + PCH" else quick_text, i)
                    parent.send(("reparse", name, text, None))
                    seconds, errors = parent.recv()
                    times.append(seconds)
                rows.append((way, setup_s, times, errors))
            except (EOFError, OSError) as exc:
                print(f"{way}: the worker failed ({exc})")
            finally:
                parent.send(None)
                proc.join(timeout=30)
    print(f"{'way':30} {'setup s':>8} {'median s':>9} {'worst s':>8} first error")
    for way, setup_s, times, errors in rows:
        median = statistics.median(times)
        first = errors[0][:120] if errors else "none"
        print(f"{way:30} {setup_s:8.2f} {median:9.2f} {max(times):8.2f} {first}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
