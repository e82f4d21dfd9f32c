#!/usr/bin/env bash
# The triton profile's differential proof on a lent H200, in one call (docs/CONFORMANCE.md):
# for every instance of benchmarks/triton_conformance.toml, kls's render against the module
# torch.compile autotunes with the same config pinned (texts, then both run bitwise), and the
# CPU path (Inductor's lowering under kls's device model) beside it.
# Usage (repo root; in .whl/ the wheels benchmarks/h200_env.sh lists):
#   bash benchmarks/h200_triton_conformance.sh
source benchmarks/h200_env.sh
set -o pipefail
python3 -m kls.cli info | tee $out/info.txt
start=$SECONDS
timeout 400 python3 benchmarks/triton_conformance.py compile --out $out/triton_conformance.json \
  --digests $out/triton211_renders.json 2>&1 | grep -v Warning | tail -20
echo "compile mode: $((SECONDS - start)) s"
timeout 120 python3 benchmarks/triton_conformance.py lower --out $out/triton_lower.json 2>&1 \
  | grep -E '"case"|identical|first_difference' | tee $out/triton_lower.txt
