"""Fail closed: `kls serve` runs no tool (clang, nvcc, the preamble warm-up) before it has read
the client's settings (issue 31, third point).

A real server over stdio, with stand-in `nvcc`, `clang++` and `clang++-19` first on PATH that
record every start. Before the fix, a client that answered `compileOnSave: false` after 3 s
still saw three clang processes and preamble files written: the server started with the
defaults (compile on save on) and handled didOpen while its configuration request was
outstanding.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

TOOL = """#!/bin/sh
echo "$0 $*" >> "{log}"
echo "clang version 19.1.7"
exit 1
"""
TEMPLATE = "{{ kernel.def_kernel(inputs=[X], outputs=[Y], names_str='X, Y') }}\n"
CONFIG = (
    '[instances.one]\nkind = "cuda"\ntemplate = "t.cu.jinja"\n'
    'tensors.X = { shape = [4], dtype = "f32" }\ntensors.Y = { shape = [4], dtype = "f32" }\n'
)


def _project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The workspace, the log the stand-in tools write, and the server's environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "tools.log"
    for name in ("nvcc", "clang++", "clang++-19"):
        tool = bin_dir / name
        tool.write_text(TOOL.format(log=log))
        tool.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    (project / "t.cu.jinja").write_text(TEMPLATE)
    (project / "kls.toml").write_text(CONFIG)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["KLS_CACHE_DIR"] = str(tmp_path / "cache")
    return project, log, env


def _capabilities() -> lsp.ClientCapabilities:
    return lsp.ClientCapabilities(
        workspace=lsp.WorkspaceClientCapabilities(
            configuration=True,
            did_change_configuration=lsp.DidChangeConfigurationClientCapabilities(),
        )
    )


async def _start(
    env: dict[str, str], answer: Any
) -> tuple[LanguageClient, dict[str, list[lsp.Diagnostic]]]:
    client = LanguageClient("settings-first-test", "1")
    published: dict[str, list[lsp.Diagnostic]] = {}

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def record(params: lsp.PublishDiagnosticsParams) -> None:
        published[params.uri] = params.diagnostics

    client.feature(lsp.WORKSPACE_CONFIGURATION)(answer)
    await client.start_io(sys.executable, "-m", "kls.cli", "serve", env=env)
    await client.initialize_async(lsp.InitializeParams(capabilities=_capabilities()))
    client.initialized(lsp.InitializedParams())
    return client, published


def _open_and_save(client: LanguageClient, path: Path) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=uri, language_id="cuda-jinja", version=1, text=path.read_text()
            )
        )
    )
    client.text_document_did_save(
        lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    return uri


async def _linted(
    client: LanguageClient, published: dict[str, list[lsp.Diagnostic]], uri: str
) -> None:
    started = time.monotonic()
    while uri not in published:
        await asyncio.sleep(0.02)
        assert client._server is not None and client._server.returncode is None, "server died"
        assert time.monotonic() - started < 20, "no diagnostics: lint must work without settings"


async def _stop(client: LanguageClient) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


def _preamble_files(env: dict[str, str]) -> list[Path]:
    folder = Path(env["KLS_CACHE_DIR"]) / "preamble"
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


async def test_no_tool_runs_while_the_settings_are_outstanding(tmp_path: Path) -> None:
    project, log, env = _project(tmp_path)
    answered: list[float] = []

    async def late_answer(params: lsp.ConfigurationParams) -> list[Any]:
        await asyncio.sleep(3.0)
        answered.append(time.monotonic())
        return [{"compileOnSave": False}]

    client, published = await _start(env, late_answer)
    try:
        uri = _open_and_save(client, project / "t.cu.jinja")
        await _linted(client, published, uri)
        while not answered:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # anything the answer or the re-check would start
        assert not log.exists(), log.read_text()
        assert not _preamble_files(env)
    finally:
        await _stop(client)


async def test_a_failed_configuration_request_is_lint_only_until_settings_arrive(
    tmp_path: Path,
) -> None:
    project, log, env = _project(tmp_path)

    async def failing(params: lsp.ConfigurationParams) -> list[Any]:
        raise RuntimeError("this client cannot answer workspace/configuration")

    client, published = await _start(env, failing)
    try:
        uri = _open_and_save(client, project / "t.cu.jinja")
        await _linted(client, published, uri)
        await asyncio.sleep(1.5)
        assert not log.exists(), log.read_text()  # the defaults say compile on save: not yet
        compiled = await client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(command="kls.compile", arguments=[uri])
        )
        assert compiled["ok"] is False and "settings" in compiled["error"]
        assert not log.exists(), log.read_text()
        # The client sends its settings with the notification: tools may run from now on.
        client.workspace_did_change_configuration(
            lsp.DidChangeConfigurationParams(settings={"kls": {"compileOnSave": True}})
        )
        client.text_document_did_save(
            lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
        )
        started = time.monotonic()
        while not log.exists():
            await asyncio.sleep(0.05)
            assert time.monotonic() - started < 15, "settings arrived, yet no tool ran on save"
    finally:
        await _stop(client)
