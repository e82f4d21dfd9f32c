#!/usr/bin/env bash
# `kls bench` and `kls bench --sanitize` on every Triton instance of templates/kls.toml and of
# benchmarks/triton_masks.toml (shapes that stress the masks), on a lent H200, in one call that
# ends within 6 minutes:
#   1. each instance verified and timed, one after another (the GPU to itself): kls's timing
#      loop with at most 2 s (shipped) or 1 s (masks) of timed launches a kernel, cuBLAS
#      beside it -> $out/bench_*.json
#      (and each run as it ends in $out/history_*/);
#   2. each instance once under compute-sanitizer's memcheck and once under its racecheck, the
#      instances side by side (nothing is timed) -> $out/sanitize_<name>.json (findings at
#      template lines), the tools' own logs in $out/sanitizer_logs.tgz.
# Usage (repo root; in .whl/ the wheels benchmarks/h200_env.sh lists):
#   bash benchmarks/h200_triton_bench.sh
source benchmarks/h200_env.sh
set -o pipefail
python3 -m kls.cli info > $out/info.txt 2>&1
/usr/local/cuda/bin/compute-sanitizer --version 2>&1 | tail -2 | tee $out/sanitizer_version.txt
SHIPPED=templates/kls.toml
MASKS=benchmarks/triton_masks.toml
shipped=$(python3 -c "
from pathlib import Path
from kls.instances import load_instances
from kls.profiles import profile
s = load_instances(Path('$SHIPPED').resolve())
print(' '.join(n for n, i in s.instances.items() if profile(i.profile).language == 'python'))")
masks=$(python3 -c "
from pathlib import Path
from kls.instances import load_instances
print(' '.join(load_instances(Path('$MASKS').resolve()).instances))")
echo "shipped: $shipped"; echo "masks: $masks"

start=$SECONDS
for part in shipped masks; do
  if [ $part = shipped ]; then config=$SHIPPED names=$shipped limit=110 seconds=2
  else config=$MASKS names=$masks limit=80 seconds=1; fi
  args=(); for name in $names; do args+=(-i "$name"); done
  # one kls process, the instances one after another
  timeout $limit python3 -m kls.cli bench "$config" --config "$config" "${args[@]}" \
    --max-seconds $seconds --timeout 45 --json > $out/bench_$part.json 2> $out/bench_$part.log
  echo "bench $part: rc $?, $((SECONDS - start)) s"
  # Each run is also in the config's history as it finishes (kept if the limit cut the rest).
  mkdir -p $out/history_$part && cp $(dirname $config)/.kls/bench/*.json $out/history_$part/ 2>/dev/null
done
python3 - "$out" <<'EOF'
import json, sys
for part in ("shipped", "masks"):
    try:
        reports = json.load(open(f"{sys.argv[1]}/bench_{part}.json"))
    except (OSError, ValueError) as exc:
        print(part, "no result:", exc)
        continue
    for r in reports:
        v = r.get("verification") or {}
        print(f"{r['instance']:28} ok={r['ok']} median={r['median_ms']} ms spread={r['spread']} "
              f"cuBLAS={r['baseline_ms']} ms max_rel_err={v.get('max_error')} {r['message'][:120]}")
EOF

start=$SECONDS
pids=()
for pair in $(for n in $shipped; do echo "$SHIPPED:$n"; done; for n in $masks; do echo "$MASKS:$n"; done); do
  config=${pair%%:*}; name=${pair#*:}
  timeout 130 python3 -m kls.cli bench "$config" --config "$config" -i "$name" --sanitize \
    --timeout 45 --json > $out/sanitize_$name.json 2> $out/sanitize_$name.log &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait $pid; done
echo "sanitize: $((SECONDS - start)) s"
tar czf $out/sanitizer_logs.tgz /tmp/kls-sanitize-* 2>/dev/null
python3 - "$out" <<'EOF'
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/sanitize_*.json")):
    try:
        [r] = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(path, "no result:", exc)
        continue
    tools = r.get("tools") or {}
    tools = {t: (v.get("errors"), v.get("seconds"), v.get("run")) for t, v in tools.items()}
    print(f"{r['instance']:28} ok={r['ok']} {tools} {r.get('message', '')[:160]}")
    for f in r.get("findings", [])[:6]:
        print("   ", f["code"], f"{f['path'].split('/')[-1]}:{f['range']['start']['line'] + 1}",
              f["message"][:220])
EOF
