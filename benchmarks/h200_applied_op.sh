#!/bin/bash
# The op `kls tune --apply` wrote into templates/kls.toml against the one it replaced, at the
# instance's own shape (bf16 4096^3), with `kls bench`'s full method and cuBLAS beside each;
# after the GPU tests (which build, verify and time every shipped instance). One call: 177 s.
# Usage (repo root; in .whl/ the nvidia-cutlass, tree-sitter and tree-sitter-cuda wheels):
#   bash benchmarks/h200_applied_op.sh
source benchmarks/h200_env.sh
old="cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_2x1x1_0_tnn_align8"
old="${old}_warpspecialized_cooperative_epi_tma"
cp templates/kls.toml /tmp/kls.toml.orig
python3 - "$old" <<'PY'
import re, sys
from pathlib import Path
p = Path("templates/kls.toml")
t = p.read_text()
block = re.search(r"\[instances\.torch211_sm90_bf16_4096\]\n(?:.+\n)+", t).group(0)
before = re.sub(r'op = ".*"', f'op = "{sys.argv[1]}"', block.replace("4096]", "4096_before]", 1))
p.write_text(t + "\n" + before.replace("swizzle = 1 }", "swizzle = 8 }"))
PY
timeout 280 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/core/test_bench_gpu.py 2>&1 \
  | grep -v "PytestConfigWarning\|_warn_or_fail\|config/__init__\|^  *$" | tail -8
for i in torch211_sm90_bf16_4096 torch211_sm90_bf16_4096_before torch211_sm90_bf16_4096 \
         torch211_sm90_bf16_4096_before; do
  timeout 200 python3 -m kls.cli bench templates/kls.toml -i $i --json \
    >"$out/bench_$i.json" 2>"$out/bench_$i.log"
  python3 - "$out/bench_$i.json" "$i" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d[0]
keys = ("ok", "median_ms", "spread", "samples", "baseline_ms", "pct_of_baseline", "tflops", "clocks")
print(sys.argv[2], {k: r.get(k) for k in keys})
PY
done
cp /tmp/kls.toml.orig templates/kls.toml
