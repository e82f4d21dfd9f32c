"""GPU figures for docs/BENCHMARKS.md (the runs: benchmarks/results/), in two steps so GPU time
is spent only on running.

prepare (here, with nvcc):
    .venv/bin/python benchmarks/gpu_bench.py prepare --out .device [--tune]
    builds every shipped instance (and the SM90 tuning candidates), copies the libraries and
    writes the worker jobs to .device/jobs.json.
run (on the GPU machine):
    PYTHONPATH=server python3 benchmarks/gpu_bench.py run --jobs .device/jobs.json --out $OUT
    for each job: kls's worker (verify, then time), then an independent timing of the same
    library with triton.testing.do_bench (median, its own cache flush), and cuBLAS through
    torch (inside kls's worker, timed kls's way).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def prepare(out: Path, tune: bool, only: list[str], parallel: int, second_shape: str = "") -> None:
    from concurrent.futures import ThreadPoolExecutor

    from kls.bench.run import BenchOptions, make_job
    from kls.compile import CompileOptions, compile_instance
    from kls.instances import InstanceSpec, load_instances
    from kls.render import render

    out.mkdir(parents=True, exist_ok=True)
    configs = [ROOT / "templates" / "kls.toml"]
    if tune:
        configs.append(ROOT / "benchmarks" / "tune_sm90.toml")
    specs = [
        spec
        for config in configs
        # tune_sm90.toml reads the shipped templates from ../templates: name that root.
        for name, spec in load_instances(config, extra_roots=[ROOT / "templates"]).instances.items()
        if (not only or name in only) and spec.reference != "none"
    ]

    def build(spec: InstanceSpec) -> dict[str, Any] | None:
        started = time.perf_counter()
        built = compile_instance(spec, CompileOptions(mode="build"))
        if not built.ok or built.artifact is None:
            print(f"{spec.name}: build failed\n{built.log[-2000:]}", file=sys.stderr)
            return None
        lib = out / f"{spec.name}.so"
        shutil.copyfile(built.artifact, lib)
        job = make_job(spec, render(spec), Path(lib.name), BenchOptions())
        how = "cached" if built.cached else "nvcc"
        print(f"{spec.name}: built in {time.perf_counter() - started:.1f} s ({how})", flush=True)
        return {"instance": spec.name, "op": spec.op, "job": job.to_json()}

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        jobs = [j for j in pool.map(build, specs) if j is not None]
    if second_shape:
        jobs += second_shape_jobs(specs, jobs, second_shape)
    (out / "jobs.json").write_text(json.dumps(jobs, indent=1))


def second_shape_jobs(specs: list[Any], jobs: list[dict[str, Any]], mnk: str) -> list[Any]:
    """torch-2.11: the library built for one shape, run on another by changing only the size,
    offset and runtime arguments (as Inductor's call_kernel passes them). The instance is
    re-rendered for the new tensors to prove the source is the same text."""
    import dataclasses

    from kls.bench.run import BenchOptions, make_job
    from kls.instances.schema import TensorSpec, column_major_strides, contiguous_strides
    from kls.render import render

    m, n, k = (int(v) for v in mnk.split("x"))
    out = []
    for spec in specs:
        built = next((j for j in jobs if j["instance"] == spec.name), None)
        if spec.profile != "torch-2.11" or built is None or spec.tensors.get("Bias"):
            continue
        x, w, y = spec.tensors["X"], spec.tensors["W"], spec.tensors["Y"]
        tensors = {
            "X": TensorSpec("X", (m, k), x.dtype, contiguous_strides((m, k))),
            "W": TensorSpec("W", (k, n), w.dtype, column_major_strides((k, n))),
            "Bias": None,
            "Y": TensorSpec("Y", (m, n), y.dtype, contiguous_strides((m, n))),
        }
        other = dataclasses.replace(spec, tensors=tensors)
        first, second = render(spec), render(other)
        if first.text != second.text:
            print(f"{spec.name}: the source differs for {mnk}; not reusing the library")
            continue
        library = Path(built["job"]["library"])
        job = make_job(other, second, library, BenchOptions())
        name = f"{spec.name}@{mnk} (library built for {spec.name})"
        out.append({"instance": name, "op": spec.op, "job": job.to_json()})
    return out


def do_bench_same_library(job: Any, lib_path: Path) -> dict[str, Any]:
    """Independent timing: triton.testing.do_bench around the same entry point."""
    try:
        import torch
        from triton.testing import do_bench
    except ImportError as exc:
        return {"available": False, "reason": str(exc)}
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    pointers: dict[str, int] = {}
    keep = []
    for name, t in job.tensors.items():
        if t is None:
            continue
        storage = torch.empty(t.storage_elements, dtype=dtypes[t.dtype], device="cuda")
        storage.uniform_(-1, 1)
        keep.append(storage)
        pointers[name] = storage.data_ptr()
    from kls.bench import marshal
    from kls.bench.worker import load_entry

    fn = load_entry(str(lib_path), job.symbol, len(job.params), [t for t, _ in job.extra_args])
    extra = tuple(int(v) for _, v in job.extra_args)  # torch-2.11: sizes, offsets, swizzle
    stream = torch.cuda.current_stream().cuda_stream
    size = ctypes.c_size_t(0)
    query = marshal.workspace_query(job.params, ctypes.addressof(size), stream, extra)
    assert fn(*query.args()) == 0
    workspace = torch.empty(max(size.value, 1), dtype=torch.uint8, device="cuda")
    args = [pointers[p] for p in job.params]

    def launch() -> None:
        fn(*args, *extra, None, workspace.data_ptr() if size.value else None, stream)

    median = do_bench(launch, warmup=1000, rep=2000, return_mode="median")
    return {
        "available": True,
        "median_ms": float(median),
        "method": "triton.testing.do_bench "
        "(warmup 1000 ms, rep 2000 ms, median, 256 MB cache clear per call)",
    }


def run(jobs_file: Path, out: Path) -> None:
    from kls.bench.job import BenchJob
    from kls.bench.report import build_report
    from kls.bench.runner import run_worker

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for entry in json.loads(jobs_file.read_text()):
        job = BenchJob.from_json(entry["job"])
        job.library = str((jobs_file.parent / job.library).resolve())
        outcome = run_worker(job, timeout_s=240)
        row: dict[str, Any] = {"instance": entry["instance"], "op": entry["op"]}
        if not outcome.ok:
            row["error"] = outcome.message
            row["result"] = outcome.result
            print(f"{entry['instance']}: {outcome.message}", flush=True)
            rows.append(row)
            continue
        report = build_report(entry["instance"], job, outcome.result)
        row["report"] = report.to_json()
        row["do_bench"] = do_bench_same_library(job, Path(job.library))
        rows.append(row)
        db = row["do_bench"].get("median_ms")
        agree = f"{(report.median_ms - db) / db * 100:+.2f}%" if db and report.median_ms else "n/a"
        print(f"{entry['instance']}: {report.headline()} | do_bench {db} ms ({agree})", flush=True)
        (out / "gpu_bench.json").write_text(json.dumps(rows, indent=1))
    (out / "gpu_bench.json").write_text(json.dumps(rows, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tune", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--parallel", type=int, default=2, help="concurrent nvcc builds")
    p.add_argument("--second-shape", default="", help="MxNxK: rerun torch-2.11 libraries there")
    r = sub.add_parser("run")
    r.add_argument("--jobs", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(
            args.out,
            args.tune,
            [n for n in args.only.split(",") if n],
            args.parallel,
            args.second_shape,
        )
    else:
        run(args.jobs, args.out)


if __name__ == "__main__":
    main()
