#!/usr/bin/env bash
# The differential proof on a lent H200, in one call (docs/CONFORMANCE.md): Inductor renders
# every case with torch 2.11's own classes; kls renders the same cases from the templates it
# reads in place from that torch (the locator finds the installed one); both texts are
# compared, both are built with nvcc on the machine's cores, and both libraries are called on
# the same inputs. Inductor's rendered text stays on the machine (/tmp/conf): only the
# comparison, the run's outputs and the digests the CPU test keeps come back.
# Usage (repo root; in .whl/ the nvidia-cutlass, tree-sitter, tree-sitter-cuda, tomlkit,
# pydot and treelib wheels): bash benchmarks/h200_conformance.sh
source benchmarks/h200_env.sh
set -o pipefail
work=/tmp/conf
mkdir -p $work/ind
python3 -m kls.cli info | tee $out/info.txt
python3 benchmarks/conformance.py inductor --out $work/ind 2>&1 | tail -20
python3 benchmarks/conformance.py kls --inductor $work/ind/inductor.json --dir $work | tee $out/compare.txt
python3 benchmarks/conformance.py build --dir $work --parallel 12 | tee $out/build.txt
python3 benchmarks/conformance.py run --dir $work --out $out | tail -12
python3 benchmarks/conformance.py digests --inductor $work/ind/inductor.json --out $out/inductor211_renders.json
python3 - <<'PY' | tee $out/rows.txt
import json
rows = json.load(open("/tmp/conf/compare.json"))["rows"]
for r in rows:
    print(r["case"], "identical" if r.get("identical") else f"DIFFERS {r.get('first_difference') or r.get('kls_error') or r.get('inductor_error')}", "extra_args_equal" if r.get("extra_args_equal") else "extra_args DIFFER")
PY
