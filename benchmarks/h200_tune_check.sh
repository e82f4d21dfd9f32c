#!/bin/bash
# A short `kls tune` on a lent H200 that shows both cuBLAS bars with their clocks (stage 1's
# short timing against stage 2's), then the GPU tests. One call: 220 s on a fresh machine.
# Usage (repo root; in .whl/ the nvidia-cutlass, tree-sitter and tree-sitter-cuda wheels):
#   bash benchmarks/h200_tune_check.sh
source benchmarks/h200_env.sh
inst=torch211_sm90_bf16_4096
cp templates/kls.toml /tmp/kls.toml.orig
# Three of the suite's shapes (one of each M), swizzle 1 and 8, six ops and the instance's own.
python3 - <<'PY'
import re
from pathlib import Path
p = Path("templates/kls.toml")
t = p.read_text()
t, n = re.subn(r"swizzle = \[1, 2, 4, 8\]\nshapes = \[\n(?:.*\n)*?\]",
               "swizzle = [1, 8]\nshapes = [[128, 4096, 4096], [2048, 4096, 14336], "
               "[8192, 14336, 4096]]", t)
assert n == 1
p.write_text(t)
PY
timeout -s INT 300 python3 -m kls.cli tune templates/kls.toml -i $inst \
  --limit 6 --json >"$out/tune_check.json" 2>"$out/tune_check.log"
echo "tune exit $?"; tail -2 "$out/tune_check.log"
python3 - "$out/tune_check.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d["baselines"]:
    print("cuBLAS stage", b["stage"], b["shape"], [round(x * 1e3, 1) for x in b["runs_ms"]],
          "us at", b["sm_clock_mhz"], "MHz", b["power_w"], "W")
for m in d["measurements"]:
    if m["ok"] and m["vars"] == {"swizzle": 8}:
        print("stage", m["stage"], m["shape"], m["unit"], round(m["median_ms"] * 1e3, 1), "us at",
              m["sm_clock_mhz"], "MHz", m["power_w"], "W")
for s in d["best"]:
    print("best", s["shape"], s["unit"], s["vars"], s["vs_cublas"])
PY
cp /tmp/kls.toml.orig templates/kls.toml
timeout 280 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/core/test_bench_gpu.py 2>&1 | tail -15
