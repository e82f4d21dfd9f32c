"""cuBLAS (torch) on an instance's tune shapes, through kls tune's GPU worker and its timing
settings (stage 1 and stage 2), for a run whose candidates were timed without a baseline.

    PYTHONPATH=server python3 benchmarks/tune_cublas.py templates/kls.toml INSTANCE --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from kls.bench.job import TensorJob
from kls.instances import load_instances
from kls.tune.candidates import at_shape
from kls.tune.gpu import GpuSession
from kls.tune.results import shape_key
from kls.tune.runner import STAGE1_TIMING, STAGE2_TIMING
from kls.tune.space import load_space


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("config", type=Path)
    p.add_argument("instance")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    spec = load_instances(args.config).instances[args.instance]
    shapes = load_space(spec).shapes
    setup: dict[str, dict[str, object]] = {}
    for shape in shapes:
        shaped = at_shape(spec, shape)
        tensors = {
            n: None
            if t is None
            else dataclasses.asdict(
                TensorJob(n, list(t.shape), list(t.stride), t.dtype.name, t.offset, n == "Y")
            )
            for n, t in shaped.tensors.items()
        }
        setup[shape_key(shape)] = {"tensors": tensors}
    gpu = GpuSession({"shapes": setup, "reference": "gemm", "seed": 0})
    gpu.start()
    rows = []
    for key in setup:
        for stage, timing in (("stage1", STAGE1_TIMING), ("stage2", STAGE2_TIMING)):
            for attempt in range(2):
                answer = gpu.request(
                    {"kind": "baseline", "id": key, "shape": key,
                     "timing": dataclasses.asdict(timing)}
                )  # fmt: skip
                row = {"shape": key, "timing_of": stage, "attempt": attempt, **answer}
                rows.append(row)
                t = answer.get("timing", {})
                print(key, stage, attempt, t.get("median"), t.get("spread"), flush=True)
    gpu.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cublas.json").write_text(json.dumps({"device": gpu.device, "rows": rows}))


if __name__ == "__main__":
    main()
