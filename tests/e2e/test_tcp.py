"""`kls serve --tcp HOST:PORT`, for attaching a debugger or a client by hand."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import pytest
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.asyncio
async def test_serve_over_tcp() -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "kls.cli", "serve", "--tcp", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = LanguageClient("tcp-test", "1")
        deadline = time.monotonic() + 30
        while True:  # the server serves one connection: connect for real, no probe
            try:
                await client.start_tcp("127.0.0.1", port)
                break
            except OSError:
                assert time.monotonic() < deadline, "kls serve --tcp never listened"
                await asyncio.sleep(0.2)
        result = await client.initialize_async(
            lsp.InitializeParams(capabilities=lsp.ClientCapabilities())
        )
        assert result.server_info is not None and result.server_info.name == "kls"
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
    finally:
        server.terminate()
        server.wait(10)
