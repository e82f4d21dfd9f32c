#!/usr/bin/env bash
# The next GPU stretch for flex and the kernel-level method, on a lent H200, in one call of
# under 10 minutes (what this session built and tested on the CPU only):
#   1. the GPU tests of kls bench for Triton (flex forward verified against torch's
#      flex_attention; --method graph on a Triton, a CUTLASS and a torch-2.11 instance)
#      -> $out/gpu_tests.txt
#   2. kls's ROWS_GUARANTEED_SAFE verdicts against torch.compile's kernel with the promise on
#      -> $out/flex_promise_gpu.json
#      and the same for flex decoding's splits -> $out/flex_decode_promise_gpu.json
#   3. kls tune of the shipped flex forward (Inductor's 7 configs x 4 flag sets, kernel
#      against kernel), --limit 16 -> $out/flex_tune.json
# Usage (repo root; in .whl/ the wheels benchmarks/h200_env.sh lists):
#   bash benchmarks/h200_flex_session.sh
source benchmarks/h200_env.sh
set -o pipefail
start=$SECONDS
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider \
  tests/core/test_bench_triton_gpu.py "tests/core/test_bench_gpu.py::test_graph_method_times_kernel_and_cublas_alike" \
  2>&1 | tail -40 > $out/gpu_tests.txt
echo "gpu tests: rc $?, $((SECONDS - start)) s"; tail -3 $out/gpu_tests.txt
timeout 150 python3 benchmarks/flex_promise_gpu.py --out $out/flex_promise_gpu.json \
  --block-n 64 128 > $out/flex_promise_gpu.log 2>&1
echo "promises: rc $?, $((SECONDS - start)) s"; grep -c DISAGREES $out/flex_promise_gpu.log
timeout 120 python3 benchmarks/flex_decode_promise_gpu.py --out $out/flex_decode_promise_gpu.json \
  > $out/flex_decode_promise_gpu.log 2>&1
echo "decode promises: rc $?, $((SECONDS - start)) s"
timeout 170 python3 -m kls.cli tune templates/kls.toml -i triton_flex_attention_causal_bf16 \
  --method graph --limit 16 --json > $out/flex_tune.json 2> $out/flex_tune.log
echo "flex tune: rc $?, $((SECONDS - start)) s"; tail -3 $out/flex_tune.log
