"""How long kls takes for templates/kls.toml's flex instances, without a GPU: the render in
the torch worker (its start, then renders with the worker warm, the template's text changed by
a comment each time so that nothing is remembered) and Triton's compile for sm_90 (the compile
step in the worker, and `kls compile` as a person runs it, the worker's start included).
Median, min and max over --repeats.

    PYTHONPATH=server .venv/bin/python benchmarks/triton_flex_timing.py --out FILE

(kls's, Inductor's and Triton's caches are new and empty for each repeat.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "templates" / "kls.toml"
INSTANCES = (
    "triton_flex_attention_causal_bf16",
    "triton_flex_decoding_bf16",
    "triton_flex_attention_backward_causal_bf16",
)


def summary(times: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
    }


def _fresh_caches() -> dict[str, str]:
    """New, empty kls, Inductor and Triton caches (a cold compile every time)."""
    kls = tempfile.mkdtemp(prefix="kls-flex-timing-")
    env = {"KLS_CACHE_DIR": kls, "TRITON_CACHE_DIR": os.path.join(kls, "triton")}
    os.environ.update(env)
    return env


def worker_figures(name: str, repeats: int) -> dict[str, Any]:
    """Per repeat, with cold caches: a new worker's first render (its start included), a
    render with the worker warm, and Triton's compile of the module for sm_90."""
    from kls.instances import load_instances
    from kls.profiles.triton.client import TorchWorker
    from kls.profiles.triton.flex_parts import concatenation, flex_op
    from kls.profiles.triton.flex_render import flex_request

    spec = load_instances(CONFIG).instances[name]
    op = flex_op(spec)
    assert op is not None
    text = concatenation(spec, op, {}).text
    firsts, renders, compiles = [], [], []
    compiled: dict[str, Any] = {}
    for i in range(repeats):
        _fresh_caches()
        worker = TorchWorker()
        start = time.perf_counter()
        answer = worker.render(flex_request(spec, op, text))
        firsts.append(time.perf_counter() - start)
        start = time.perf_counter()
        answer = worker.render(flex_request(spec, op, text + f"# {i}\n"))
        renders.append(time.perf_counter() - start)
        assert "module" in answer, answer
        request = {
            "kind": "compile",
            "module": answer["module"],
            "cc": 90,
            "num_warps": spec.num_warps,
            "num_stages": spec.num_stages,
        }
        start = time.perf_counter()
        compiled = worker.render(request)
        compiles.append(time.perf_counter() - start)
        assert "shared" in compiled, compiled
        if worker._proc is not None:  # this worker's process, started above
            TorchWorker._kill(worker._proc)
    usage = {k: compiled.get(k) for k in ("registers", "shared", "stack", "local")}
    return {
        "first_render_with_worker_start": summary(firsts),
        "render_warm": summary(renders),
        "compile_sm90_cold": summary(compiles),
        "compile_usage": usage,
    }


def cli_compile(name: str, repeats: int) -> dict[str, float]:
    """`kls compile` of the instance, a new process and cold caches each time."""
    times = []
    kls = str(Path(sys.executable).with_name("kls"))
    for _ in range(repeats):
        env = {**os.environ, **_fresh_caches()}
        start = time.perf_counter()
        done = subprocess.run(
            [kls, "compile", str(CONFIG), "-i", name], capture_output=True, text=True, env=env
        )
        times.append(time.perf_counter() - start)
        assert done.returncode == 0, done.stderr[-2000:]
    return summary(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = {}
    for name in INSTANCES:
        rows[name] = worker_figures(name, args.repeats)
        rows[name]["kls_compile_cli"] = cli_compile(name, 3)
        print(name, json.dumps(rows[name]), file=sys.stderr)
    machine = f"{os.cpu_count()} CPUs"
    args.out.write_text(json.dumps({"machine": machine, "instances": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
