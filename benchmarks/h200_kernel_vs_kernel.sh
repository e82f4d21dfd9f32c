#!/usr/bin/env bash
# On a lent H200 (repo root; .whl/ as for h200_env.sh): kls's CUTLASS GEMM, Inductor's
# max-autotune choice and cuBLAS, kernel against kernel (benchmarks/kernel_vs_kernel.py).
source benchmarks/h200_env.sh
set -o pipefail
timeout 560 python3 benchmarks/kernel_vs_kernel.py --out $out/kernel_vs_kernel.json 2>&1 | grep -v Warning | tail -40
