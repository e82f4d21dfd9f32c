"""Compile through the language server: on save, as a command, with progress and cancel."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.e2e.helpers import open_doc, published, wait_diagnostics

CACHE = tempfile.mkdtemp(prefix="kls-lsp-compile-")

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed"),
    pytest.mark.server_env({"KLS_CACHE_DIR": CACHE}),
]


def save(client: LanguageClient, path: Path, text: str, version: int) -> None:
    path.write_text(text)
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    client.text_document_did_save(
        lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=path.as_uri()))
    )


async def nvcc_diagnostics(
    client: LanguageClient, uri: str, present: bool, since: int = 0
) -> list[lsp.Diagnostic]:
    return await wait_diagnostics(
        client,
        uri,
        source="nvcc",
        where=lambda found: bool(found) == present,
        since=since,
        timeout=60,
    )


@pytest.mark.asyncio
async def test_save_maps_nvcc_error_then_fix_clears(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    good = path.read_text()
    uri = open_doc(client, path, good)
    broken = good.replace("const float scale =", "const flaot scale =")
    save(client, path, broken, 2)
    found = await nvcc_diagnostics(client, uri, present=True)
    line = broken[: broken.index("const flaot")].count("\n")
    assert found[0].range.start.line == line
    assert found[0].code == "KT601"
    # An unsaved edit re-runs kls's checks; their diagnostics join nvcc's, not replace them.
    kls_error = broken.replace("{{template.header().getvalue()}}", "{{template.header()}}")
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=3),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=kls_error)],
        )
    )
    found = await wait_diagnostics(client, uri, 3)
    assert {("kls", "KT303"), ("nvcc", "KT601")} <= {(d.source, d.code) for d in found}
    mark = len(published(client))
    save(client, path, good, 4)
    assert await nvcc_diagnostics(client, uri, present=False, since=mark) == []
    assert await wait_diagnostics(client, uri, 4, where=lambda found: not found) == []


@pytest.mark.asyncio
async def test_compile_command_reports_progress_and_result(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = open_doc(client, path)
    result = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="kls.compile", arguments=[uri, "build"])
    )
    assert result["ok"] and result["mode"] == "build"
    assert Path(result["artifact"]).is_file()
    reports = [r for rs in client.progress_reports.values() for r in rs]
    assert any(isinstance(r, lsp.WorkDoneProgressBegin) for r in reports)
    assert any(isinstance(r, lsp.WorkDoneProgressEnd) for r in reports)


async def start_slow_compile(
    client: LanguageClient, workspace: Path, tag: str
) -> tuple[asyncio.Future[object], str, object]:
    """Start an SM80 check whose key is new (so nvcc really runs); wait until nvcc runs.
    Returns the command's future, the template URI and the progress token."""
    path = workspace / "cutlass2x_gemm.cu.jinja"
    path.write_text(path.read_text() + f"\n// {tag} {os.getpid()} {id(workspace)}\n")
    uri = open_doc(client, path)
    task = asyncio.ensure_future(
        client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(command="kls.compile", arguments=[uri, "check"])
        )
    )
    for _ in range(400):
        running = [
            t
            for t, rs in client.progress_reports.items()
            if any(
                isinstance(r, lsp.WorkDoneProgressReport) and "nvcc" in (r.message or "")
                for r in rs
            )
        ]
        if running:
            return task, uri, running[-1]
        await asyncio.sleep(0.05)
    raise AssertionError("nvcc never started")


@pytest.mark.asyncio
async def test_cancel_stops_the_command_and_kills_nvcc(
    client: LanguageClient, workspace: Path
) -> None:
    task, _, token = await start_slow_compile(client, workspace, "progress-cancel")
    await asyncio.sleep(0.5)
    client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(task, 30)
    assert result["cancelled"] is True  # type: ignore[index]
    await asyncio.sleep(0.3)
    assert nvcc_processes() == []


def nvcc_processes() -> list[str]:
    """nvcc and its tools working in this test's cache (clang's background preamble build,
    which a compile's cancel does not stop, also works there)."""
    found = subprocess.run(["pgrep", "-f", CACHE], capture_output=True, text=True).stdout.split()
    names = []
    for pid in found:
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue  # ended meanwhile
    return [n for n in names if not n.startswith("clang")]


@pytest.mark.asyncio
async def test_kls_cancel_command_stops_a_running_compile(
    client: LanguageClient, workspace: Path
) -> None:
    task, uri, _ = await start_slow_compile(client, workspace, "command-cancel")
    stopped = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="kls.cancel", arguments=[uri])
    )
    assert stopped["cancelled"] == ["compile"]
    result = await asyncio.wait_for(task, 30)
    assert result["cancelled"] is True  # type: ignore[index]
