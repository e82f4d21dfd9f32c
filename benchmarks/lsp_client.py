"""The LSP client the editor-latency benchmarks drive `kls serve` with (stdio, pygls): open
one document, send versioned edits, and note when each version's diagnostics arrive."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

Edit = tuple[int, str, str]  # (0-based line, its old text, its new text)


class Client:
    def __init__(self, uri: str, language_id: str) -> None:
        self.uri = uri
        self.language_id = language_id
        self.client = LanguageClient("kls-bench", "1")
        # version -> (when its diagnostics arrived, the diagnostics)
        self.published: dict[int, tuple[float, list[lsp.Diagnostic]]] = {}
        self.event = asyncio.Event()

        @self.client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_publish(params: lsp.PublishDiagnosticsParams) -> None:
            if params.uri == self.uri and params.version is not None:
                self.published.setdefault(
                    params.version, (time.perf_counter(), list(params.diagnostics))
                )
            self.event.set()

    async def start(self, settings: dict[str, Any] | None = None) -> None:
        await self.client.start_io(sys.executable, "-m", "kls.cli", "serve")
        options = {"settings": settings} if settings is not None else None
        await self.client.initialize_async(
            lsp.InitializeParams(
                capabilities=lsp.ClientCapabilities(), initialization_options=options
            )
        )
        self.client.initialized(lsp.InitializedParams())

    async def wait_version(self, version: int, timeout: float = 60) -> float:
        """When the diagnostics of `version` arrived (perf_counter seconds)."""
        deadline = time.perf_counter() + timeout
        while version not in self.published:
            self.event.clear()
            if version in self.published:
                break
            await asyncio.wait_for(self.event.wait(), max(deadline - time.perf_counter(), 0.01))
        return self.published[version][0]

    def open(self, text: str) -> None:
        self.client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                text_document=lsp.TextDocumentItem(
                    uri=self.uri, language_id=self.language_id, version=1, text=text
                )
            )
        )

    def change(self, version: int, edits: list[Edit]) -> None:
        """One didChange with an edit per (line, old text, new text): one version, one check."""
        changes: list[lsp.TextDocumentContentChangeEvent] = [
            lsp.TextDocumentContentChangePartial(
                range=lsp.Range(
                    start=lsp.Position(line=line, character=0),
                    end=lsp.Position(line=line, character=len(old)),
                ),
                text=new,
            )
            for line, old, new in edits
        ]
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=self.uri, version=version),
                content_changes=changes,
            )
        )

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()
