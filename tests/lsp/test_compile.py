"""Compile from the editor, in process: arguments, nvcc findings into the store, cancel, and
compile on save with a stand-in for nvcc (the real one: tests/e2e/test_compile.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp

from kls.compile import CompileResult
from kls.findings import Finding, Severity
from kls.lsp import compile as lsp_compile
from kls.positions import Range
from tests.lsp.harness import Harness, LspError


async def test_compile_arguments(lsp_harness: Harness, tmp_path: Path) -> None:
    with pytest.raises(LspError, match=r"kls.compile takes arguments \[uri, mode\?\]"):
        await lsp_harness.command("kls.compile")
    with pytest.raises(LspError, match="mode is 'check' or 'build'"):
        await lsp_harness.command("kls.compile", "file:///x.cu.jinja", "fast")
    with pytest.raises(LspError, match=r"kls.cancel takes arguments \[uri\]"):
        await lsp_harness.command("kls.cancel", 1)
    path = tmp_path / "alone.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), "// x\n")
    answer = await lsp_harness.command("kls.compile", uri)
    assert answer == {"ok": False, "error": "no instance declares this template in kls.toml"}
    assert await lsp_harness.command("kls.cancel", uri) == {"cancelled": []}


def fake_compile(line: int, started: threading.Event | None = None) -> Any:
    """compile_instance's stand-in: an nvcc error on `line` of the main template; with
    `started`, it waits for a cancel like a long nvcc run."""

    def run(spec: Any, options: Any, overrides: Any, cancel: threading.Event, **_: Any) -> Any:
        if started is not None:
            started.set()
            while not cancel.wait(0.01):
                pass
            from kls.compile.run import CompileCancelled

            raise CompileCancelled()
        path = str(spec.template.resolve())
        error = Finding(
            "KT601", Severity.ERROR, Range.of_line(line), "nvcc: bad", path, source="nvcc"
        )
        return CompileResult(spec.name, options.mode, False, findings=[error] if line >= 0 else [])

    return run


async def test_save_publishes_nvcc_findings_beside_kls(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lsp_compile, "compile_instance", fake_compile(7))
    path = workspace / "softmax.cu.jinja"
    bad = path.read_text().replace("{{template.header().getvalue()}}", "{{template.header()}}")
    uri = lsp_harness.open(path.as_uri(), bad)
    await lsp_harness.wait_diagnostics(uri, 1)
    lsp_harness.notify(lsp.TEXT_DOCUMENT_DID_SAVE, {"textDocument": {"uri": uri}})
    found = await lsp_harness.wait_diagnostics(uri, source="nvcc", where=bool)
    assert found[0]["range"]["start"]["line"] == 7
    both = {(d["source"], d["code"]) for d in lsp_harness.latest(uri)}
    assert {("kls", "KT303"), ("nvcc", "KT601")} <= both
    # The next compile finds nothing: nvcc's findings go, kls's stay.
    monkeypatch.setattr(lsp_compile, "compile_instance", fake_compile(-1))
    mark = len(lsp_harness.published)
    lsp_harness.notify(lsp.TEXT_DOCUMENT_DID_SAVE, {"textDocument": {"uri": uri}})
    await lsp_harness.wait_diagnostics(
        uri, source="nvcc", where=lambda found: not found, since=mark
    )
    sources = {d["source"] for d in lsp_harness.latest(uri)}
    assert "kls" in sources and "nvcc" not in sources


async def test_compile_on_save_follows_the_setting(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(
        lsp_compile, "compile_instance", lambda spec, *a, **k: calls.append(spec.name)
    )
    lsp_harness.configure(compileOnSave=False)
    await asyncio.sleep(0.01)
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    lsp_harness.notify(lsp.TEXT_DOCUMENT_DID_SAVE, {"textDocument": {"uri": uri}})
    await lsp_harness.wait_diagnostics(uri, 1)
    await asyncio.sleep(0.05)
    assert calls == []


async def test_cancel_stops_a_running_compile(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()
    monkeypatch.setattr(lsp_compile, "compile_instance", fake_compile(0, started))
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    task = asyncio.ensure_future(lsp_harness.command("kls.compile", uri, "build"))
    while not started.is_set():
        await asyncio.sleep(0.005)
    assert await lsp_harness.command("kls.cancel", uri) == {"cancelled": ["compile"]}
    answer = await asyncio.wait_for(task, 5)
    assert answer == {"ok": False, "cancelled": True, "instance": "softmax_bf16_8192x4096"}
    progress = [n for n in lsp_harness.notifications if n["method"] == "$/progress"]
    assert progress[-1]["params"]["value"]["kind"] == "end"


async def test_cancelling_the_request_stops_the_compile(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pygls cancels only the request's future: the job watches it and stops too."""
    started = threading.Event()
    monkeypatch.setattr(lsp_compile, "compile_instance", fake_compile(0, started))
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    msg_id = 10_000
    lsp_harness._send(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": lsp.WORKSPACE_EXECUTE_COMMAND,
            "params": {"command": "kls.compile", "arguments": [uri]},
        }
    )
    while not started.is_set():
        await asyncio.sleep(0.005)
    lsp_harness.notify(lsp.CANCEL_REQUEST, {"id": msg_id})
    for _ in range(200):
        if not lsp_harness.server.jobs.running:
            break
        await asyncio.sleep(0.01)
    assert lsp_harness.server.jobs.running == {}
