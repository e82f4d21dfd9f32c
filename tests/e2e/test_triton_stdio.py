"""A Triton template over stdio (pytest-lsp, a real `kls serve` process, VS Code's recorded
capabilities): completion of buffer names in a helper's quotes, go to definition from a buffer
to its kls.toml tensor and the helper hover, in an untrusted workspace (no torch: the static
layer, as a user sees it before trusting a folder). tests/lsp/test_triton_editor.py covers
the rendered and compiled parts in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as lsp

from kls.scaffold import init
from tests.capabilities import capabilities
from tests.e2e.helpers import SERVER, record_publishes, wait_diagnostics


def _position(text: str, needle: str, offset: int) -> lsp.Position:
    at = text.index(needle) + offset
    return lsp.Position(line=text.count("\n", 0, at), character=at - text.rfind("\n", 0, at) - 1)


@pytest.mark.slow  # a server process: 2.8 s on the 2-core machine
async def test_a_triton_template_over_stdio(tmp_path: Path) -> None:
    init(tmp_path, "triton")
    template = tmp_path / "scale.py.jinja"
    text = template.read_text()
    client = await SERVER.start()
    try:
        record_publishes(client)
        # What VS Code answers for a folder the user has not trusted (workspace/configuration).
        client.set_configuration({"workspaceTrusted": False}, section="kls")
        await client.initialize_session(
            lsp.InitializeParams(
                capabilities=capabilities("visual-studio-code"),
                initialization_options={"settings": {"workspaceTrusted": False}},
            )
        )
        uri = template.as_uri()
        client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                text_document=lsp.TextDocumentItem(
                    uri=uri, language_id="python-jinja", version=1, text=text
                )
            )
        )
        await wait_diagnostics(client, uri, 1)
        doc = lsp.TextDocumentIdentifier(uri=uri)
        quoted = _position(text, 'size("X", 0)', len('size("'))
        completion = await client.text_document_completion_async(
            lsp.CompletionParams(text_document=doc, position=quoted)
        )
        assert isinstance(completion, lsp.CompletionList)
        assert [item.label for item in completion.items] == ["X"]
        found = await client.text_document_definition_async(
            lsp.DefinitionParams(text_document=doc, position=quoted)
        )
        assert isinstance(found, lsp.Location)
        assert found.uri == (tmp_path / "kls.toml").resolve().as_uri()
        toml = (tmp_path / "kls.toml").read_text().split("\n")
        assert toml[found.range.start.line].startswith("tensors.X = ")
        hover = await client.text_document_hover_async(
            lsp.HoverParams(text_document=doc, position=quoted)
        )
        assert hover is not None and isinstance(hover.contents, lsp.MarkupContent)
        assert "**size**" in hover.contents.value and "tensor `X`" in hover.contents.value
        await client.shutdown_session()
    finally:
        await client.stop()
