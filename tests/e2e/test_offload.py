"""Heavy reads never run on the language server's event loop: a template at kls's size bound
being parsed does not hold up a request on another document."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from kls.input_limits import MAX_TEMPLATE_CODE_BYTES


def _open(client: LanguageClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=uri, language_id="cuda-jinja", version=1, text=text
            )
        )
    )
    return uri


async def test_a_large_parse_does_not_hold_up_another_document(tmp_path: Path) -> None:
    # The costliest shape kls.input_limits measured: a long Jinja expression, inside the bound.
    big_text = "{{ [" + "1," * ((MAX_TEMPLATE_CODE_BYTES - 100) // 2) + "1] }}\n"
    big = tmp_path / "big" / "big.cu.jinja"
    big.parent.mkdir()
    small = tmp_path / "small" / "small.cu.jinja"
    small.parent.mkdir()
    small_text = "{{ kernel. }}\n"
    client = LanguageClient("offload-test", "1")
    await client.start_io(sys.executable, "-m", "kls.cli", "serve")
    try:
        await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
        client.initialized(lsp.InitializedParams())
        small_uri = _open(client, small, small_text)
        await client.text_document_completion_async(  # warm: the small document is parsed
            lsp.CompletionParams(
                text_document=lsp.TextDocumentIdentifier(uri=small_uri),
                position=lsp.Position(line=0, character=10),
            )
        )
        big_uri = _open(client, big, big_text)
        big_symbols = asyncio.ensure_future(
            client.text_document_document_symbol_async(
                lsp.DocumentSymbolParams(text_document=lsp.TextDocumentIdentifier(uri=big_uri))
            )
        )
        await asyncio.sleep(0.05)  # the big parse is under way
        started = time.monotonic()
        items = await client.text_document_completion_async(
            lsp.CompletionParams(
                text_document=lsp.TextDocumentIdentifier(uri=small_uri),
                position=lsp.Position(line=0, character=10),
            )
        )
        small_latency = time.monotonic() - started
        assert items is not None
        await big_symbols
        big_latency = time.monotonic() - started
        # The big parse takes most of a second; the small request must not wait for it.
        assert big_latency > 0.3, f"the big parse was too quick to tell ({big_latency:.2f} s)"
        assert small_latency < big_latency / 2, (small_latency, big_latency)
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
