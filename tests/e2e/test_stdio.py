"""End to end over stdio with pytest-lsp, as VS Code, as Neovim and as an LSP 3.18 client
(their recorded capabilities). What each feature answers is tested in process
(tests/unit); here: the real process, its transport, and what differs between clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import LanguageClient

from tests.capabilities import CLIENTS
from tests.e2e.helpers import change_doc, open_doc, published, wait_diagnostics

each_client = pytest.mark.parametrize("client", CLIENTS, indirect=True)


def field(result: object, key: str) -> object:
    """A key of a JSON object result (pygls gives dicts for commands, objects for requests)."""
    return result[key] if isinstance(result, dict) else getattr(result, key)


def find(text: str, needle: str) -> tuple[int, int]:
    at = text.index(needle)
    return text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)


@each_client
async def test_planted_error_has_exact_range(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text().replace("{{kernel.ptr(Y)}}", "{{kernel.ptr(Z)}}")
    uri = open_doc(client, path, text)
    diagnostics = await wait_diagnostics(client, uri, 1)
    undefined = [d for d in diagnostics if d.code == "KT102"]
    assert undefined, diagnostics
    line, col = find(text, "ptr(Z)")
    assert undefined[0].range.start == lsp.Position(line=line, character=col + 4)
    assert undefined[0].range.end == lsp.Position(line=line, character=col + 5)
    assert undefined[0].source == "kls"


@each_client
async def test_rapid_edits_never_publish_stale(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    good = path.read_text()
    uri = open_doc(client, path, good)
    for version in range(2, 30):
        broken = good.replace("{{kernel.ptr(Y)}}", "{{kernel.ptr(" + "Q" * version + ")}}")
        change_doc(client, uri, version, broken if version < 29 else good)
    assert await wait_diagnostics(client, uri, 29) == []
    versions = [p.version for p in published(client) if p.uri == uri]
    assert versions == sorted(versions), versions
    assert versions[-1] == 29


@each_client
async def test_text_document_content_preview_and_refresh(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_diagnostics(client, uri, 1)
    answer = await client.protocol.send_request_async("kls/preview", {"uri": uri})
    preview = str(field(answer, "uri"))
    assert preview.startswith("kls-preview:")
    refreshed: list[str] = []
    client.protocol.fm.features[lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT_REFRESH] = lambda params: (
        refreshed.append(params.uri)
    )
    content = await client.protocol.send_request_async(
        lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT, lsp.TextDocumentContentParams(uri=preview)
    )
    assert "kls_softmax_bf16_8192x4096_rows<256>" in content.text
    change_doc(client, uri, 2, text.replace("#include <cfloat>", "#include <cfloat> // v2"))
    await wait_diagnostics(client, uri, 2)
    workspace_caps = client.capabilities.workspace if client.capabilities else None
    if workspace_caps and workspace_caps.text_document_content:
        for _ in range(50):
            if refreshed:
                break
            await asyncio.sleep(0.05)
        assert refreshed == [preview]
    content = await client.protocol.send_request_async(
        lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT, lsp.TextDocumentContentParams(uri=preview)
    )
    assert "// v2" in content.text


@each_client
async def test_server_advertises_text_document_content(client: LanguageClient) -> None:
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert list(caps.workspace.text_document_content.schemes) == ["kls-preview"]


async def test_hover_shows_buffer_and_rendered_text(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = open_doc(client, path)
    line, col = find(text, "kernel.ptr(X)")
    hover = await client.text_document_hover_async(
        lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=line, character=col + 11),
        )
    )
    assert hover is not None
    value = hover.contents.value  # type: ignore[union-attr]
    assert "**X** (softmax_bf16_8192x4096): `bfloat16[8192, 4096]`" in value
    assert "C parameter #0 (`const bfloat16* X`)" in value


async def test_pull_diagnostics(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = open_doc(client, path, path.read_text() + "{% if %}\n")
    report = await client.text_document_diagnostic_async(
        lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    assert [d.code for d in report.items] == ["KT101"]  # type: ignore[union-attr]


async def test_commands_answer(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = open_doc(client, path)
    chosen = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(
            command="kls.selectInstance", arguments=[uri, "softmax_f32_4096x1024"]
        )
    )
    assert field(chosen, "active") == "softmax_f32_4096x1024"
    answer = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="kls.preview", arguments=[uri])
    )
    assert field(answer, "instance") == "softmax_f32_4096x1024"
    assert "const float* X" in str(field(answer, "text"))


async def test_unknown_document_is_an_error_not_a_crash(client: LanguageClient) -> None:
    with pytest.raises(JsonRpcInvalidParams, match="not open"):
        await client.text_document_hover_async(
            lsp.HoverParams(
                text_document=lsp.TextDocumentIdentifier(uri="file:///nowhere/x.cu.jinja"),
                position=lsp.Position(line=0, character=0),
            )
        )
    with pytest.raises(JsonRpcInvalidParams):
        await client.protocol.send_request_async("kls/preview", {"nouri": 1})
    symbols = await client.text_document_document_symbol_async(
        lsp.DocumentSymbolParams(text_document=lsp.TextDocumentIdentifier(uri="file:///nope"))
    )
    assert symbols == []
