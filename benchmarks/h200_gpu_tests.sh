#!/usr/bin/env bash
# On a lent H200 (repo root; in .whl/ the wheels h200_env.sh lists plus pygls, lsprotocol,
# cattrs, pytest-lsp, pytest-asyncio): the GPU tests with their durations, then a Triton
# instance run, verified and timed beside cuBLAS (benchmarks/triton_mm_gpu.py).
source benchmarks/h200_env.sh
set -o pipefail
start=$SECONDS
timeout ${GPU_TESTS_SECONDS:-420} python3 -m pytest -m gpu -q -p no:cacheprovider --durations=25 2>&1 | tail -45 | tee $out/gpu_tests.txt
echo "pytest -m gpu: $((SECONDS - start)) s" | tee -a $out/gpu_tests.txt
[ -n "${SKIP_TRITON:-}" ] || timeout 150 python3 benchmarks/triton_mm_gpu.py --out $out/triton_mm.json 2>&1 | tail -25
