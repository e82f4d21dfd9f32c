#!/usr/bin/env bash
# On a lent H200 (repo root): kls's own stream-K GEMM (instance sm90_streamk_bf16) over its
# 12-shape suite, kernel against kernel with cuBLAS in one run (benchmarks/streamk_suite.py:
# L2 flushed and warm, kls.bench.graph_timing's method). Phase B starts no new setting
# after BUDGET_S (300 s) of the script; `timeout` stops the whole run at 450 s.
# Carry .whl/ (the wheels benchmarks/h200_env.sh installs) and the libraries built on a CPU
# machine with
#   kls tune templates/cutlass3x_streamk_gemm.cu.jinja -i sm90_streamk_bf16 --build-only
# which keeps them in templates/.kls/tune/sm90_streamk_bf16/libs (12 x 1.6 MB); a library not
# there is built on the H200 with nvcc first (about a minute for all, 12 at a time).
# Usage: bash benchmarks/h200_streamk_suite.sh
source benchmarks/h200_env.sh
set -o pipefail
libs=templates/.kls/tune/sm90_streamk_bf16/libs
timeout -s INT 450 python3 benchmarks/streamk_suite.py --out "$out/streamk_suite.json" \
  --libs "$libs" --budget-s "${BUDGET_S:-300}" 2>&1 | grep -v Warning | tail -60
