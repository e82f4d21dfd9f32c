"""Op-name completion in kls.toml as an editor feels it: `kls serve` over stdio, the shipped
kls.toml opened with one instance's `op = "` line being typed, then completion requests at
that position (the first ones may come back incomplete while the op list is built off the
loop; the figure is the requests after it arrived), median and p99 of the round trip.

Usage: .venv/bin/python benchmarks/op_completion_latency.py [--requests 200] [--level L]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = "sm90_bf16_4096"
TYPED = 'op = "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128'


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--level", default=None, help="cutlass_instantiation_level of the instance")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp()) / "templates"
    shutil.copytree(ROOT / "templates", folder, ignore=shutil.ignore_patterns(".kls"))
    text = (folder / "kls.toml").read_text()
    lines = text.split("\n")
    table = lines.index(f"[instances.{INSTANCE}]")
    row = next(i for i in range(table, len(lines)) if lines[i].startswith("op = "))
    lines[row] = TYPED
    if args.level:
        lines.insert(row, f'cutlass_instantiation_level = "{args.level}"')
        row += 1
    config = folder / "kls.toml"
    client = LanguageClient("kls-bench", "1")
    await client.start_io(sys.executable, "-m", "kls.cli", "serve")
    await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
    client.initialized(lsp.InitializedParams())
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(config.as_uri(), "toml", 1, "\n".join(lines))
        )
    )
    params = lsp.CompletionParams(
        lsp.TextDocumentIdentifier(config.as_uri()), lsp.Position(row, len(TYPED))
    )
    started = time.perf_counter()
    while True:
        found = await client.text_document_completion_async(params)
        assert isinstance(found, lsp.CompletionList)
        if found.items:
            break
        if not found.is_incomplete:
            raise SystemExit("no completion at the op line: is the instance there?")
        await asyncio.sleep(0.05)
    ready = time.perf_counter() - started
    times = []
    for _ in range(args.requests):
        t0 = time.perf_counter()
        found = await client.text_document_completion_async(params)
        times.append((time.perf_counter() - t0) * 1000)
    assert isinstance(found, lsp.CompletionList)
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(
        f"{platform.node()} ({platform.machine()}, Python {platform.python_version()}): "
        f"op list ready {ready:.2f} s after open; {len(found.items)} items; "
        f"completion median {statistics.median(times):.2f} ms, p99 {p99:.2f} ms, "
        f"min {times[0]:.2f} ms, max {times[-1]:.2f} ms over {len(times)} requests"
    )
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


if __name__ == "__main__":
    asyncio.run(main())
