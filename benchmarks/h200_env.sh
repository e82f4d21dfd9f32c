# Sourced by the benchmarks/h200_*.sh scripts on a lent H200 (from the repo root): installs
# the wheels carried in .whl/ (nvidia-cutlass, tree-sitter, tree-sitter-cuda) into /tmp/site,
# puts kls on PYTHONPATH with its compile cache under .kls/ (kept between warm calls), names
# the installed torch as KLS_TORCH_SOURCE, sets
# $out to the device tool's $OUT, and prints what the GPU is.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/server:$PWD KLS_CACHE_DIR=$PWD/.kls/cache PYTHONUNBUFFERED=1
# The tests read Inductor's files from KLS_TORCH_SOURCE only (tests/upstream.py): the torch
# installed there (without it the GPU tests that need torch's templates are skipped).
KLS_TORCH_SOURCE=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
export KLS_TORCH_SOURCE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
