#!/bin/bash
# The tune suite on a lent H200, in two calls of at most 10 minutes that must follow each other
# while the machine is still warm (the compile cache of the first serves the second; it lives
# under .kls/, which .gitignore names: the device tool keeps only ignored outputs between calls,
# and a cache in a folder ignored only by .git/info/exclude was wiped between two calls):
#   build: `kls tune --build-only` (16 nvcc at a time) and, beside it, Inductor's max-autotune of
#          the same shapes (compiled while the builds run, timed against cuBLAS once they end);
#   tune:  the whole `kls tune --resume` (every build a cache hit): stage 1, stage 2, cuBLAS in
#          the run; run it again, still warm, if the time limit stopped it: it goes on from there.
# Usage (repo root; in .whl/ the nvidia-cutlass, tree-sitter and tree-sitter-cuda wheels):
#   bash benchmarks/h200_tune_suite.sh build|tune      (INDUCTOR=0 ... build: no Inductor run)
set -u
step=$1
source benchmarks/h200_env.sh
tmpl=templates/kls.toml
inst=torch211_sm90_bf16_4096
if [ "$step" = build ]; then
  rm -f "$out/builds_done"
  ( timeout -s INT 540 python3 -m kls.cli tune $tmpl -i $inst --build-only --json --jobs 14 \
      >"$out/build_only.json" 2>"$out/build_only.log"; touch "$out/builds_done" ) &
  if [ "${INDUCTOR:-1}" = 1 ]; then  # INDUCTOR=0: the builds alone
    timeout -s INT 555 python3 benchmarks/inductor_autotune.py --out "$out/inductor.json" \
      --wait-for "$out/builds_done" 2>&1 | grep -v "^W1\|Warning" | tail -40
  fi
  wait
  tail -3 "$out/build_only.log"
  python3 - "$out/build_only.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b = d["builds"]
print("builds", len(b), "ok", sum(1 for x in b if x["ok"]), "failed",
      [(x["tile"], x["family"], x["error"][:80]) for x in b if x["ok"] is False][:12])
PY
else
  timeout -s INT 570 python3 -m kls.cli tune $tmpl -i $inst --json --resume >"$out/tune.json" \
    2>"$out/tune.log"
  echo "exit $?"
  tail -5 "$out/tune.log"
  cp -r templates/.kls/tune/$inst/results.json templates/.kls/tune/$inst/results.csv \
    templates/.kls/tune/$inst/plot.svg "$out/" 2>/dev/null
  python3 - "$out/results.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d.get("best", []):
    print(b["shape"], b.get("op", "")[50:], b.get("vars"), b.get("median_ms"), b.get("vs_cublas"))
print("winner", d.get("winner"))
PY
fi
