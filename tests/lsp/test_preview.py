"""Preview: kls/preview, kls.preview, kls.selectInstance and workspace/textDocumentContent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from kls.lsp.preview import parse_preview_uri, preview_uri
from tests.lsp.harness import Harness, LspError


def test_preview_uri_round_trip(tmp_path: Path) -> None:
    template = tmp_path / "a b" / "t.cu.jinja"
    uri = preview_uri(template, "inst 1")
    assert uri.startswith("kls-preview:")
    assert parse_preview_uri(uri) == (template, "inst 1")
    assert parse_preview_uri(template.as_uri()) is None


async def test_preview_follows_edits_and_instance(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = lsp_harness.open(path.as_uri(), text)
    first = await lsp_harness.request("kls/preview", {"uri": uri})
    assert first["instance"] == "softmax_bf16_8192x4096"
    assert "kls_softmax_bf16_8192x4096_rows<256>" in first["text"]
    assert first["error"] is None
    lsp_harness.change(uri, 2, text.replace("#include <cfloat>", "#include <cfloat>\n// edited"))
    second = await lsp_harness.request("kls/preview", {"uri": uri})
    assert "// edited" in second["text"]
    chosen = await lsp_harness.command("kls.selectInstance", uri, "softmax_f32_4096x1024")
    assert chosen == {
        "ok": True,
        "active": "softmax_f32_4096x1024",
        "instances": ["softmax_bf16_8192x4096", "softmax_f32_4096x1024"],
    }
    assert any(r["method"] == lsp.WORKSPACE_CODE_LENS_REFRESH for r in lsp_harness.server_requests)
    third = await lsp_harness.command("kls.preview", uri)
    assert third["instance"] == "softmax_f32_4096x1024"
    assert "const float* X" in third["text"]


async def test_select_instance_errors(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    answer = await lsp_harness.command("kls.selectInstance", uri, "nope")
    assert answer["ok"] is False and answer["error"] == "no instance 'nope'"
    with pytest.raises(LspError, match="takes arguments"):
        await lsp_harness.command("kls.selectInstance")
    with pytest.raises(LspError, match="must be a string"):
        await lsp_harness.command("kls.selectInstance", uri, 3)
    with pytest.raises(LspError, match="kls/preview needs"):
        await lsp_harness.request("kls/preview", {"nouri": 1})


async def test_preview_without_an_instance(
    lsp_harness: Harness, ws: object, tmp_path: Path
) -> None:
    path = tmp_path / "alone.cu.jinja"
    path.write_text("// nothing\n")
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    answer = await lsp_harness.request("kls/preview", {"uri": uri})
    assert answer == {
        "instance": None,
        "text": None,
        "uri": None,
        "error": "no instance declares this template in kls.toml",
    }


@pytest.mark.parametrize("lsp_harness", ["lsp-3.18", "visual-studio-code"], indirect=True)
async def test_text_document_content_preview_and_refresh(
    lsp_harness: Harness, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = lsp_harness.open(path.as_uri(), text)
    await lsp_harness.wait_diagnostics(uri, 1)
    preview = (await lsp_harness.request("kls/preview", {"uri": uri}))["uri"]
    content = await lsp_harness.request(lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT, {"uri": preview})
    assert "kls_softmax_bf16_8192x4096_rows<256>" in content["text"]
    lsp_harness.change(uri, 2, text.replace("#include <cfloat>", "#include <cfloat> // v2"))
    await lsp_harness.wait_diagnostics(uri, 2)
    await asyncio.sleep(0)
    refreshed = [
        r["params"]["uri"]
        for r in lsp_harness.server_requests
        if r["method"] == lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT_REFRESH
    ]
    supported = lsp_harness.server.supports_content_refresh()
    assert refreshed == ([preview] if supported else [])
    content = await lsp_harness.request(lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT, {"uri": preview})
    assert "// v2" in content["text"]
    with pytest.raises(LspError, match="kls-preview"):
        await lsp_harness.request(lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT, {"uri": uri})


@pytest.mark.parametrize("lsp_harness", ["lsp-3.18", "neovim"], indirect=True)
async def test_server_advertises_text_document_content(lsp_harness: Harness) -> None:
    caps = lsp_harness.init_result["capabilities"]
    assert caps["workspace"]["textDocumentContent"]["schemes"] == ["kls-preview"]
    assert "diagnosticProvider" not in caps  # pushed only, unless asked (test_documents.py)
    assert set(caps["executeCommandProvider"]["commands"]) >= {
        "kls.preview",
        "kls.selectInstance",
        "kls.compile",
        "kls.cancel",
        "kls.benchmark",
    }


def test_a_triton_templates_preview_is_a_python_document(tmp_path: Path) -> None:
    """The rendered module of a `.py.jinja` is Python: the preview's name says so, for the
    editor's highlighting, and reads back to its template."""
    template = tmp_path / "mm.py.jinja"
    uri = preview_uri(template, "mm")
    assert uri.split("?")[0].endswith("mm.py.jinja.py")
    assert parse_preview_uri(uri) == (template, "mm")
    cuda = preview_uri(tmp_path / "g.cu.jinja", "g")
    assert cuda.split("?")[0].endswith("g.cu.jinja.cu")
    assert parse_preview_uri(cuda) == (tmp_path / "g.cu.jinja", "g")
