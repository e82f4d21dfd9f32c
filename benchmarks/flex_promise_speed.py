"""How long kls takes to decide flex's promises for a long mask (kls.profiles.triton.
flex_promises, one strip of 128 query rows at a time), beside torch's create_block_mask of the
whole mask, and each one's peak resident memory (a fresh process for each side).

Usage: .venv/bin/python benchmarks/flex_promise_speed.py [--size 16384] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

CHILD = """
import json, resource, sys, time
import torch
sys.path.insert(0, "server")
side, size, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def window(b, h, q, kv):
    return (q >= kv) & (q - kv < 128)

def once():
    if side == "kls":
        from kls.profiles.triton.flex_promises import promise_breaks
        promise_breaks(torch, window, size, size, "flex_attention", 64)
    else:
        from torch.nn.attention.flex_attention import create_block_mask
        create_block_mask(window, None, None, size, size, device="cpu", BLOCK_SIZE=128)

times = []
for _ in range(repeats):
    t0 = time.perf_counter()
    once()
    times.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": times, "peak_rss_mb": peak}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}; a sliding window of 128 keys over {args.size}^2"
    )
    print("| side | median | min-max | peak RSS |")
    print("|---|---|---|---|")
    for side in ("kls", "create_block_mask"):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, side, str(args.size), str(args.repeats)],
            capture_output=True,
            text=True,
            check=True,
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
        s = found["seconds"]
        print(
            f"| {side} | {statistics.median(s):.2f} s | {min(s):.2f}-{max(s):.2f} s | "
            f"{found['peak_rss_mb']:.0f} MB |"
        )


if __name__ == "__main__":
    main()
