"""Hover, completion, definition and symbols through the server, in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp

from tests.lsp.harness import Harness, LspError


def find(text: str, needle: str) -> tuple[int, int]:
    at = text.index(needle)
    return text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)


def at(uri: str, line: int, character: int) -> dict[str, Any]:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


@pytest.mark.parametrize("lsp_harness", ["visual-studio-code", "neovim"], indirect=True)
async def test_hover_shows_buffer_and_rendered_text(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = lsp_harness.open(path.as_uri(), text)
    line, col = find(text, "kernel.ptr(X)")
    hover = await lsp_harness.request(lsp.TEXT_DOCUMENT_HOVER, at(uri, line, col + 11))
    value = hover["contents"]["value"]
    assert "kernel.ptr(node)" in value
    assert "**X** (softmax_bf16_8192x4096): `bfloat16[8192, 4096]`" in value
    assert "C parameter #0 (`const bfloat16* X`)" in value
    assert "```cuda\nX\n```" in value


async def test_hover_on_a_name_the_instance_does_not_have(
    lsp_harness: Harness, workspace: Path
) -> None:
    """A buffer name the instance lacks is said to be missing, not None (declared "none")."""
    path = workspace / "softmax.cu.jinja"
    text = path.read_text().replace("kernel.ptr(X)", "kernel.ptr(Z)", 1)
    uri = lsp_harness.open(path.as_uri(), text)
    line, col = find(text, "kernel.ptr(Z)")
    hover = await lsp_harness.request(lsp.TEXT_DOCUMENT_HOVER, at(uri, line, col + 11))
    value = hover["contents"]["value"]
    assert "`Z` is not a tensor of instance `softmax_bf16_8192x4096`" in value
    assert "is None" not in value


async def test_hover_outside_a_call_is_empty(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    assert await lsp_harness.request(lsp.TEXT_DOCUMENT_HOVER, at(uri, 0, 0)) is None


async def test_hover_on_a_template_that_does_not_render(
    lsp_harness: Harness, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text().replace('names_str="X, Y")', 'names_str="X, Y, Z")')
    uri = lsp_harness.open(path.as_uri(), text)
    line, col = find(text, "kernel.ptr(X)")
    hover = await lsp_harness.request(lsp.TEXT_DOCUMENT_HOVER, at(uri, line, col + 11))
    assert "does not render" in hover["contents"]["value"]


async def test_completion_of_helpers_and_buffers(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text() + "{{ kernel. }}\n"
    uri = lsp_harness.open(path.as_uri(), text)
    line = text.count("\n") - 1
    result = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_COMPLETION, at(uri, line, len("{{ kernel."))
    )
    labels = {item["label"] for item in result["items"]}
    assert {"def_kernel", "ptr", "size", "stride", "check_not_null"} <= labels
    l2, c2 = find(text, "kernel.ptr(X)")
    result = await lsp_harness.request(lsp.TEXT_DOCUMENT_COMPLETION, at(uri, l2, c2 + 11))
    assert {"X", "Y"} <= {item["label"] for item in result["items"]}
    result = await lsp_harness.request(lsp.TEXT_DOCUMENT_COMPLETION, at(uri, 999, 0))
    assert {"kernel", "template"} <= {item["label"] for item in result["items"]}


async def test_definition_of_a_buffer_and_symbols(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    uri = lsp_harness.open(path.as_uri(), text)
    line, col = find(text, "kernel.ptr(X)")
    location = await lsp_harness.request(lsp.TEXT_DOCUMENT_DEFINITION, at(uri, line, col + 11))
    dl, dc = find(text, "inputs=[X]")
    assert location["uri"] == uri
    assert location["range"]["start"] == {"line": dl, "character": dc + 8}
    symbols = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": uri}}
    )
    assert any("def_kernel" in s["name"] for s in symbols)


async def test_definition_of_a_sub_template_name(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "cutlass3x_gemm.cu.jinja"
    text = path.read_text()
    uri = lsp_harness.open(path.as_uri(), text)
    line, col = find(text, "render_gemm_arguments(argument_template")
    location = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_DEFINITION, at(uri, line, col + len("render_gemm_arguments(") + 3)
    )
    assert location["uri"] == (workspace / "cutlass3x_args.cuh.jinja").as_uri()


async def test_definition_of_an_include(lsp_harness: Harness, ws: Any) -> None:
    ws.write("part.cuh.jinja", "// part\n")
    path = ws.write("t.cu.jinja", '{% include "part.cuh.jinja" %}\n')
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    location = await lsp_harness.request(lsp.TEXT_DOCUMENT_DEFINITION, at(uri, 0, 14))
    assert location["uri"] == (ws.root / "part.cuh.jinja").as_uri()


async def test_unknown_document_is_an_error_not_a_crash(lsp_harness: Harness) -> None:
    with pytest.raises(LspError, match="not open"):
        await lsp_harness.request(lsp.TEXT_DOCUMENT_HOVER, at("file:///nowhere/x.cu.jinja", 0, 0))
    symbols = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": "file:///nope"}}
    )
    assert symbols == []
