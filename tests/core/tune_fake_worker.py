"""A stand-in for kls.tune.worker on machines without a GPU (tests): same protocol, made-up
timings derived from the library name, a crash for libraries whose name holds 'crash'."""

import hashlib
import json
import os
import signal
import sys

CLOCKS = {"sm_clock_mhz": 1755.0, "power_w": 650.0, "readings": 3}


def main() -> int:
    setup = json.loads(sys.stdin.readline())
    shapes = {k: v["tensors"] for k, v in setup["shapes"].items()}
    print(json.dumps({"ready": True, "device": {"name": "Fake GPU"}, "l2_flush_bytes": 1}))
    sys.stdout.flush()
    log = os.environ.get("KLS_FAKE_LOG")
    for line in sys.stdin:
        req = json.loads(line)
        if log:
            with open(log, "a") as f:
                f.write(req["id"] + "\n")
        m, n, k = (int(v) for v in req["shape"].split("x"))
        if req["kind"] == "baseline":
            ms = 2 * m * n * k / 600e12 * 1e3
            if req["timing"]["max_seconds"] < 0.3:  # stage 1's short timing: higher clocks
                ms /= float(os.environ.get("KLS_FAKE_SHORT_TIMING_SPEEDUP", "1"))
            answer = {
                "id": req["id"],
                "ok": True,
                "library": "fake cuBLAS",
                "timing": {"median": ms, "spread": 0.01, "n": 40},
                "clocks": CLOCKS,
            }
        else:
            if os.environ.get("KLS_FAKE_CRASH") and req["library"].endswith(
                os.environ["KLS_FAKE_CRASH"] + ".so"
            ):
                os.kill(os.getpid(), signal.SIGSEGV)
            assert req["shape"] in shapes and os.path.isfile(req["library"]), req
            key = req["library"] + str(req["extra_args"])
            if os.environ.get("KLS_FAKE_BY_N"):  # speeds that differ by N (a dispatch by N),
                # the same in every run (the library's file name, not its temporary folder)
                key = os.path.basename(req["library"]) + str(req["extra_args"])
                key += os.environ["KLS_FAKE_BY_N"] + str(n)
            seed = hashlib.sha256(key.encode()).digest()
            speed = 450 + seed[0] % 300  # TFLOP/s
            ms = 2 * m * n * k / (speed * 1e12) * 1e3
            answer = {
                "id": req["id"],
                "ok": True,
                "verification": {"ok": True, "max_error": 0.003},
                "timing": {"median": ms, "spread": 0.02, "n": 20},
                "clocks": CLOCKS,
            }
        print(json.dumps(answer))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
