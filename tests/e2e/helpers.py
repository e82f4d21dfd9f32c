"""Helpers for end-to-end language-server tests over stdio (pytest-lsp): the server command,
the clients' recorded capabilities, document sync and the one `wait_diagnostics`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.capabilities import capabilities

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


def published(client: LanguageClient) -> list[lsp.PublishDiagnosticsParams]:
    """Every publishDiagnostics the client received, in order (`initialize` records them)."""
    return client.published  # type: ignore[attr-defined,no-any-return]


async def wait_diagnostics(
    client: LanguageClient,
    uri: str,
    version: int | None = None,
    source: str | None = None,
    where: Callable[[list[lsp.Diagnostic]], bool] | None = None,
    since: int = 0,
    timeout: float = 20.0,
) -> list[lsp.Diagnostic]:
    """The diagnostics of the first publish for `uri` (at `version`, when given; from the
    `since`-th publish on) whose diagnostics (of `source`, when given) satisfy `where`
    (default: any)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen = since
    while True:
        log = published(client)
        for params in log[seen:]:
            seen += 1
            if params.uri != uri or (version is not None and params.version != version):
                continue
            found = [d for d in params.diagnostics if source in (None, d.source)]
            if where is None or where(found):
                return found
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"no matching diagnostics for {uri} (version {version})")
        try:
            await asyncio.wait_for(
                client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS),
                min(remaining, 0.5),
            )
        except TimeoutError:
            continue


async def diagnostics_for(
    client: LanguageClient, uri: str, version: int, timeout: float = 20.0
) -> list[lsp.Diagnostic]:
    """`wait_diagnostics` at `version` (the name older tests use)."""
    return await wait_diagnostics(client, uri, version, timeout=timeout)


def record_publishes(client: LanguageClient) -> None:
    """Keep every publish (pytest-lsp keeps only the latest per document)."""
    log: list[lsp.PublishDiagnosticsParams] = []
    client.published = log  # type: ignore[attr-defined]

    def record(params: lsp.PublishDiagnosticsParams) -> None:
        log.append(params)
        client.diagnostics[params.uri] = params.diagnostics

    client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record


async def initialize(client: LanguageClient, caps: lsp.ClientCapabilities | str) -> Any:
    """Initialize a pytest-lsp client the way VS Code would answer the server's requests."""
    if isinstance(caps, str):
        caps = capabilities(caps)
    record_publishes(client)
    # VS Code answers code-lens refresh requests; pytest-lsp's client does not by default.
    client.protocol.fm.features[lsp.WORKSPACE_CODE_LENS_REFRESH] = lambda params: None
    result = await client.initialize_session(lsp.InitializeParams(capabilities=caps))
    client.init_result = result  # type: ignore[attr-defined]
    return result
