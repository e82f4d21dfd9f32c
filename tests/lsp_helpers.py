"""Helpers for end-to-end language-server tests over stdio (pytest-lsp)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "kls.cli", "serve"])


def open_doc(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=uri,
                language_id="cuda-jinja",
                version=version,
                text=path.read_text() if text is None else text,
            )
        )
    )
    return uri


def change_doc(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def diagnostics_for(
    client: LanguageClient, uri: str, version: int, timeout: float = 20.0
) -> list[lsp.Diagnostic]:
    """Wait until the server publishes diagnostics for `uri` at `version`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        published = client.diagnostics.get(uri)
        versions = getattr(client, "diagnostic_versions", {})
        if published is not None and versions.get(uri) == version:
            return published
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise TimeoutError(f"no diagnostics for {uri} at version {version}")
        try:
            await asyncio.wait_for(
                client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), remaining
            )
        except TimeoutError:
            continue


async def initialize(client: LanguageClient, capabilities: lsp.ClientCapabilities) -> Any:
    """Initialize a pytest-lsp client the way VS Code would answer the server's requests."""
    # VS Code answers code-lens refresh requests; pytest-lsp's client does not by default.
    client.protocol.fm.features[lsp.WORKSPACE_CODE_LENS_REFRESH] = lambda params: None
    return await client.initialize_session(lsp.InitializeParams(capabilities=capabilities))
