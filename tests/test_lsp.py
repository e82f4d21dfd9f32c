"""End to end over stdio with pytest-lsp, as VS Code and as Neovim (their real capabilities)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import LanguageClient, client_capabilities

from tests.lsp_helpers import SERVER, change_doc, initialize, open_doc

# VS Code 1.65 and Neovim 0.11 as pytest-lsp records them, and an LSP 3.18 client (VS Code's
# capabilities plus workspace.textDocumentContent, which no recorded client has yet).
CLIENTS = ["visual-studio-code", "neovim", "lsp-3.18"]


def capabilities(name: str) -> lsp.ClientCapabilities:
    if name != "lsp-3.18":
        return client_capabilities(name)
    caps = client_capabilities("visual-studio-code")
    assert caps.workspace is not None
    caps.workspace.text_document_content = lsp.TextDocumentContentClientCapabilities()
    return caps


@pytest_lsp.fixture(config=SERVER, params=CLIENTS)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient) -> AsyncIterator[None]:
    published: list[lsp.PublishDiagnosticsParams] = []
    lsp_client.published = published  # type: ignore[attr-defined]

    def record(params: lsp.PublishDiagnosticsParams) -> None:
        published.append(params)
        lsp_client.diagnostics[params.uri] = params.diagnostics

    # Keep every publish (pytest-lsp keeps only the latest) to check versions never go back.
    lsp_client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    result = await initialize(lsp_client, capabilities(request.param))
    lsp_client.init_result = result  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def published_for(client: LanguageClient, uri: str, version: int) -> list[lsp.Diagnostic]:
    log: list[lsp.PublishDiagnosticsParams] = client.published  # type: ignore[attr-defined]
    for _ in range(400):
        for params in log:
            if params.uri == uri and params.version == version:
                return list(params.diagnostics)
        await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    raise AssertionError("no diagnostics")


def field(result: object, key: str) -> object:
    """A key of a JSON object result (pygls gives dicts for commands, objects for requests)."""
    return result[key] if isinstance(result, dict) else getattr(result, key)


def find(text: str, needle: str) -> tuple[int, int]:
    at = text.index(needle)
    return text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)


@pytest.mark.asyncio
async def test_planted_error_has_exact_range(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text().replace("{{kernel.ptr(Y)}}", "{{kernel.ptr(Z)}}")
    uri = open_doc(client, path, text)
    diagnostics = await published_for(client, uri, 1)
    undefined = [d for d in diagnostics if d.code == "KT102"]
    assert undefined, diagnostics
    line, col = find(text, "ptr(Z)")
    assert undefined[0].range.start == lsp.Position(line=line, character=col + 4)
    assert undefined[0].range.end == lsp.Position(line=line, character=col + 5)
    assert undefined[0].source == "kls"


@pytest.mark.asyncio
async def test_clean_template_then_fix_clears(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    good = path.read_text()
    uri = open_doc(
        client, path, good.replace("{{template.header().getvalue()}}", "{{template.header()}}")
    )
    assert [d.code for d in await published_for(client, uri, 1)] == ["KT303"]
    change_doc(client, uri, 2, good)
    assert await published_for(client, uri, 2) == []


@pytest.mark.asyncio
async def test_rapid_edits_never_publish_stale(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    good = path.read_text()
    uri = open_doc(client, path, good)
    for version in range(2, 30):
        broken = good.replace("{{kernel.ptr(Y)}}", "{{kernel.ptr(" + "Q" * version + ")}}")
        change_doc(client, uri, version, broken if version < 29 else good)
    assert await published_for(client, uri, 29) == []
    versions = [p.version for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    assert versions == sorted(versions), versions
    assert versions[-1] == 29


@pytest.mark.asyncio
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
    assert "kernel.ptr(node)" in value
    assert "**X** (softmax_bf16_8192x4096): `bfloat16[8192, 4096]`" in value
    assert "C parameter #0 (`const bfloat16* X`)" in value
    assert "```cuda\nX\n```" in value


@pytest.mark.asyncio
async def test_completion_of_helpers_and_buffers(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text() + "{{ kernel. }}\n"
    uri = open_doc(client, path, text)
    line = text.count("\n") - 1
    result = await client.text_document_completion_async(
        lsp.CompletionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=line, character=len("{{ kernel.")),
        )
    )
    assert result is not None
    labels = {
        item.label for item in (result.items if isinstance(result, lsp.CompletionList) else result)
    }
    assert {"def_kernel", "ptr", "size", "stride", "check_not_null"} <= labels
    l2, c2 = find(text, "kernel.ptr(X)")
    result = await client.text_document_completion_async(
        lsp.CompletionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=l2, character=c2 + 11),
        )
    )
    assert result is not None
    items = result.items if isinstance(result, lsp.CompletionList) else result
    assert {"X", "Y"} <= {i.label for i in items}


@pytest.mark.asyncio
async def test_definition_symbols_and_lenses(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = open_doc(client, path)
    line, col = find(text, "kernel.ptr(X)")
    location = await client.text_document_definition_async(
        lsp.DefinitionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=line, character=col + 11),
        )
    )
    assert isinstance(location, lsp.Location)
    dl, dc = find(text, "inputs=[X]")
    assert location.range.start == lsp.Position(line=dl, character=dc + 8)
    symbols = await client.text_document_document_symbol_async(
        lsp.DocumentSymbolParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    assert symbols and any("def_kernel" in s.name for s in symbols)
    lenses = await client.text_document_code_lens_async(
        lsp.CodeLensParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    assert lenses is not None
    titles = [lens.command.title for lens in lenses if lens.command]
    assert titles == ["Preview (softmax_bf16_8192x4096)", "Compile"]
    assert all(lens.range.start.line == find(text, "kernel.def_kernel")[0] for lens in lenses)
    lazy = [lens for lens in lenses if lens.command is None]
    resolved = await client.code_lens_resolve_async(lazy[0])
    assert resolved.command is not None and resolved.command.title == "Benchmark"
    assert resolved.command.command == "kls.benchmark"


@pytest.mark.asyncio
async def test_definition_of_a_sub_template_name(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "cutlass3x_gemm.cu.jinja"
    text = path.read_text()
    uri = open_doc(client, path)
    line, col = find(text, "render_gemm_arguments(argument_template")
    location = await client.text_document_definition_async(
        lsp.DefinitionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=line, character=col + len("render_gemm_arguments(") + 3),
        )
    )
    assert isinstance(location, lsp.Location)
    assert location.uri == (workspace / "cutlass3x_args.cuh.jinja").as_uri()


@pytest.mark.asyncio
async def test_preview_follows_edits_and_instance(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = open_doc(client, path)
    first = await client.protocol.send_request_async("kls/preview", {"uri": uri})
    assert field(first, "instance") == "softmax_bf16_8192x4096"
    assert "kls_softmax_bf16_8192x4096_rows<256>" in str(field(first, "text"))
    change_doc(client, uri, 2, text.replace("#include <cfloat>", "#include <cfloat>\n// edited"))
    second = await client.protocol.send_request_async("kls/preview", {"uri": uri})
    assert "// edited" in str(field(second, "text"))
    chosen = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(
            command="kls.selectInstance", arguments=[uri, "softmax_f32_4096x1024"]
        )
    )
    assert field(chosen, "active") == "softmax_f32_4096x1024"
    third = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command="kls.preview", arguments=[uri])
    )
    assert field(third, "instance") == "softmax_f32_4096x1024"
    assert "const float* X" in str(field(third, "text"))


@pytest.mark.asyncio
async def test_pull_diagnostics(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = open_doc(client, path, path.read_text() + "{% if %}\n")
    report = await client.text_document_diagnostic_async(
        lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    assert [d.code for d in report.items] == ["KT101"]  # type: ignore[union-attr]


@pytest.mark.asyncio
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
    # The server still answers.
    symbols = await client.text_document_document_symbol_async(
        lsp.DocumentSymbolParams(text_document=lsp.TextDocumentIdentifier(uri="file:///nope"))
    )
    assert symbols == []


@pytest.mark.asyncio
async def test_text_document_content_preview_and_refresh(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = open_doc(client, path)
    await published_for(client, uri, 1)
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
    await published_for(client, uri, 2)
    if client.capabilities.workspace and client.capabilities.workspace.text_document_content:
        for _ in range(50):
            if refreshed:
                break
            await asyncio.sleep(0.05)
        assert refreshed == [preview]
    content = await client.protocol.send_request_async(
        lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT, lsp.TextDocumentContentParams(uri=preview)
    )
    assert "// v2" in content.text


@pytest.mark.asyncio
async def test_server_advertises_text_document_content(client: LanguageClient) -> None:
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert list(caps.workspace.text_document_content.schemes) == ["kls-preview"]


@pytest.mark.asyncio
async def test_settings_choose_the_active_instance(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = open_doc(client, path)
    client.set_configuration({"activeInstance": "softmax_f32_4096x1024"}, section="kls")
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
    for _ in range(100):
        answer = await client.protocol.send_request_async("kls/preview", {"uri": uri})
        if field(answer, "instance") == "softmax_f32_4096x1024":
            break
        await asyncio.sleep(0.05)
    assert field(answer, "instance") == "softmax_f32_4096x1024"


@pytest.mark.asyncio
async def test_watched_config_change_rechecks(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = open_doc(client, path)
    assert await published_for(client, uri, 1) == []
    config = workspace / "kls.toml"
    config.write_text(config.read_text().replace("vars = { BLOCK_SIZE = 256 }\n", ""))
    client.workspace_did_change_watched_files(
        lsp.DidChangeWatchedFilesParams(
            changes=[lsp.FileEvent(uri=config.as_uri(), type=lsp.FileChangeType.Changed)]
        )
    )
    for _ in range(200):
        codes = [d.code for d in client.diagnostics.get(uri, [])]
        if codes:
            break
        await asyncio.sleep(0.05)
    assert codes == ["KT102"]
    assert "BLOCK_SIZE" in client.diagnostics[uri][0].message


@pytest.mark.asyncio
async def test_kls_toml_problems_show_in_kls_toml(client: LanguageClient, workspace: Path) -> None:
    config = workspace / "kls.toml"
    text = config.read_text().replace('arch = "80"', 'arch = "80"\nbeta = "one"', 1)
    config.write_text(text)
    open_doc(client, workspace / "softmax.cu.jinja")
    uri = config.as_uri()
    for _ in range(200):
        if client.diagnostics.get(uri):
            break
        await asyncio.sleep(0.05)
    found = client.diagnostics[uri]
    assert [d.code for d in found] == ["KT002"]
    assert found[0].range.start.line == text.split("\n").index('beta = "one"')
