"""Triton templates in the editor, through the real server in process: completion of helpers,
buffers and config names, go to definition from a buffer to its kls.toml tensor, hover of a
helper call with what it rendered to, the inlay hint of Triton's compile on save, and the
PTX / SASS view with a line mapped to its instructions.

The template is `kls init --triton`'s (kls's own, rendered through Inductor's "mm" launch).
The tests that render or compile need torch 2.11 and triton importable (they skip without,
as tests/core/test_triton.py's do) and are slow: the torch worker's start is seconds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp

from kls.lsp.protocol import ASSEMBLY_COMMAND
from kls.scaffold import init
from tests.core.test_triton import needs_torch
from tests.lsp.harness import Harness, LspError


@pytest.fixture
async def untrusted() -> AsyncIterator[Harness]:
    """A client whose workspace is untrusted: torch never runs, the static layer only."""
    harness = Harness()
    harness.settings = {"workspaceTrusted": False}
    await harness.initialize()
    yield harness
    await harness.close()


def _project(folder: Path) -> tuple[Path, str]:
    init(folder, "triton")
    template = folder / "scale.py.jinja"
    return template, template.read_text()


def _at(text: str, needle: str, offset: int = 0) -> dict[str, int]:
    at = text.index(needle) + offset
    line = text.count("\n", 0, at)
    return {"line": line, "character": at - (text.rfind("\n", 0, at) + 1)}


def _labels(answer: Any) -> set[str]:
    return {item["label"] for item in answer["items"]}


async def _opened(harness: Harness, folder: Path, text: str | None = None) -> tuple[str, str]:
    template, original = _project(folder)
    text = original if text is None else text
    uri = harness.open(template.as_uri(), text, language_id="python-jinja")
    await harness.wait_diagnostics(uri, 1)
    return uri, text


async def test_completion_offers_buffers_helpers_and_config(
    untrusted: Harness, tmp_path: Path
) -> None:
    typing = '{{def_kernel("X")}}\n    M = {{size("\n    N = {{ \n    s = BLO\n'
    uri, text = await _opened(untrusted, tmp_path, typing)

    async def complete(needle: str, offset: int, trigger: str | None = None) -> Any:
        context = {"triggerKind": 2, "triggerCharacter": trigger} if trigger else None
        return await untrusted.request(
            lsp.TEXT_DOCUMENT_COMPLETION,
            {
                "textDocument": {"uri": uri},
                "position": _at(text, needle, offset),
                **({"context": context} if context else {}),
            },
        )

    quoted = await complete('{{size("', len('{{size("'), '"')
    assert _labels(quoted) == {"X"}  # def_kernel's names, bound to the instance's tensors
    [x] = quoted["items"]
    assert x["detail"] == "X: bfloat16[1024x512] stride=(512, 1)"
    in_jinja = _labels(await complete("{{ \n", 3))
    assert {"def_kernel", "size", "stride", "load_input", "store_output", "modification"} <= (
        in_jinja
    )
    assert {"BLOCK_M", "BLOCK_N", "SCALE", "UPCAST"} <= in_jinja  # the instance's vars
    in_python = _labels(await complete("BLO\n", 3))
    assert "BLOCK_M" in in_python and "size" not in in_python


async def test_definition_goes_from_a_buffer_to_its_tensor(
    untrusted: Harness, tmp_path: Path
) -> None:
    uri, text = await _opened(untrusted, tmp_path)
    for needle in ('size("X", 0)', 'def_kernel("X")'):
        found = await untrusted.request(
            lsp.TEXT_DOCUMENT_DEFINITION,
            {"textDocument": {"uri": uri}, "position": _at(text, needle, needle.index("X"))},
        )
        config = tmp_path / "kls.toml"
        assert found["uri"] == config.resolve().as_uri()
        toml = config.read_text().split("\n")
        assert toml[found["range"]["start"]["line"]].startswith("tensors.X = ")
    elsewhere = await untrusted.request(
        lsp.TEXT_DOCUMENT_DEFINITION,
        {"textDocument": {"uri": uri}, "position": _at(text, "tiles_n = ")},
    )
    assert elsewhere is None


async def test_hover_without_torch_says_why_nothing_rendered(
    untrusted: Harness, tmp_path: Path
) -> None:
    """Untrusted: no torch, the static layer only; the hover still names the helper and the
    buffer's tensor, and says why no lines."""
    uri, text = await _opened(untrusted, tmp_path)
    hover = await untrusted.request(
        lsp.TEXT_DOCUMENT_HOVER,
        {"textDocument": {"uri": uri}, "position": _at(text, 'size("X", 0)', 7)},
    )
    value = hover["contents"]["value"]
    assert "**size**" in value and "tensor `X` of instance `scale_bf16`" in value
    assert "bfloat16[1024x512]" in value and "untrusted" in value
    answer = await untrusted.command(ASSEMBLY_COMMAND, uri, "ptx")
    assert not answer["ok"] and "untrusted" in answer["error"]
    with pytest.raises(LspError, match="kind is 'ptx' or 'sass'"):
        await untrusted.command(ASSEMBLY_COMMAND, uri, "cubin")


@needs_torch
@pytest.mark.slow
async def test_hover_shows_what_a_helper_rendered_to(tmp_path: Path) -> None:
    harness = Harness()
    harness.settings = {"workspaceTrusted": True, "compileOnSave": False}
    await harness.initialize()
    try:
        uri, text = await _opened(harness, tmp_path)

        async def hover(needle: str, offset: int) -> str:
            found = await harness.request(
                lsp.TEXT_DOCUMENT_HOVER,
                {"textDocument": {"uri": uri}, "position": _at(text, needle, offset)},
                timeout=120,
            )
            return str(found["contents"]["value"])

        size = await hover('{{size("X", 0)}}', 4)
        assert "M = 1024" in size and "1 line" in size
        header = await hover('{{def_kernel("X")}}', 4)
        assert "@triton.jit" in header and "def triton_" in header
        stored = await hover("{{store_output(", 4)
        assert "tl.store(" in stored
    finally:
        await harness.close()


@needs_torch
@pytest.mark.slow
async def test_save_compiles_and_the_ptx_and_sass_views_map_lines(tmp_path: Path) -> None:
    harness = Harness()
    harness.settings = {"workspaceTrusted": True}
    await harness.initialize()
    try:
        uri, text = await _opened(harness, tmp_path)
        harness.notify(lsp.TEXT_DOCUMENT_DID_SAVE, {"textDocument": {"uri": uri}})
        used = await harness.wait_diagnostics(
            uri, where=lambda ds: any(d["code"] == "KT860" for d in ds), timeout=180
        )
        assert used
        hints = await harness.request(
            lsp.TEXT_DOCUMENT_INLAY_HINT,
            {
                "textDocument": {"uri": uri},
                "range": {
                    "start": {"line": 0, "character": 0},
                    "end": {"line": 40, "character": 0},
                },
            },
        )
        [hint] = hints
        assert hint["position"]["line"] == 0  # the def_kernel line
        assert "registers" in hint["label"] and "KiB shared of 227.0 KiB" in hint["label"]
        assert "no spills" in hint["label"]

        line = _at(text, "x = tl.load(")["line"]
        ptx = await harness.command(ASSEMBLY_COMMAND, uri, "ptx", line)
        assert ptx["ok"], ptx
        listing = ptx["text"].split("\n")
        assert ".loc" in ptx["text"] and ptx["lines"]
        assert any("ld.global" in listing[n] for n in ptx["lines"])  # the template's tl.load
        served = await harness.request(
            lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT, {"uri": ptx["uri"]}, timeout=120
        )
        assert served["text"] == ptx["text"]

        # From the preview: a module line, here the kernel's `def`, to its SASS.
        preview = await harness.command("kls.preview", uri)
        module = preview["text"].split("\n")
        def_line = next(i for i, s in enumerate(module) if s.startswith("def triton_"))
        sass = await harness.command(ASSEMBLY_COMMAND, preview["uri"], "sass", def_line)
        assert sass["ok"] and sass["lines"], sass
        assert all("/*" in sass["text"].split("\n")[n] for n in sass["lines"])
    finally:
        await harness.close()


@needs_torch
@pytest.mark.slow
async def test_the_static_layer_is_published_before_the_torch_render(tmp_path: Path) -> None:
    """A trusted workspace renders through torch (hundreds of milliseconds an edit): each
    edit publishes its static findings first, with the last render's own findings kept
    (KT103: Inductor fails to import a module line that is not Python), then the render's."""
    harness = Harness()
    harness.settings = {"workspaceTrusted": True, "compileOnSave": False}
    await harness.initialize()
    try:
        template, text = _project(tmp_path)
        broken = text.replace("    scaled = x * SCALE", "    scaled = = x * SCALE", 1)
        uri = harness.open(template.as_uri(), broken, language_id="python-jinja")

        def codes(ds: list[dict[str, Any]]) -> set[str]:
            return {str(d["code"]) for d in ds}

        await harness.wait_diagnostics(uri, 1, where=lambda ds: "KT103" in codes(ds), timeout=120)
        since = len(harness.published)
        planted = broken.replace('{{size("X", 0)}}', '{{size("X", 5)}}', 1)
        harness.change(uri, 2, planted)
        first = await harness.wait_diagnostics(uri, 2, since=since, timeout=60)
        assert {"KT806", "KT103"} <= codes(first)  # static at once, the render's kept
        final = await harness.wait_diagnostics(uri, 2, since=since + 1, timeout=120)
        # The render replaces the kept layer: it stops at size()'s IndexError, the same
        # mistake as KT806 (one finding), before the module with `= =` is ever imported.
        assert codes(final) == {"KT806"}, final
        # Two publishes of version 2: the static layer's, then the render's.
        assert [p.get("version") for p in harness.published[since:]].count(2) == 2
    finally:
        await harness.close()


@needs_torch
@pytest.mark.slow
async def test_typing_renders_only_the_text_edits_paused_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keystrokes closer than the pause each get their static layer; the torch render runs
    for the text the typing stopped at, not for each keystroke's."""
    from kls.lsp import documents

    checked: list[tuple[bool, str]] = []
    check = documents.check_document

    def recording(ls: Any, uri: str, templates: Any, *args: Any) -> Any:
        render = args[4] if len(args) > 4 else True
        checked.append((render, templates[0].text))
        return check(ls, uri, templates, *args)

    monkeypatch.setattr(documents, "check_document", recording)
    harness = Harness()
    harness.settings = {"workspaceTrusted": True, "compileOnSave": False}
    await harness.initialize()
    try:
        template, text = _project(tmp_path)
        uri = harness.open(template.as_uri(), text, language_id="python-jinja")
        await harness.wait_diagnostics(uri, 1)
        typed = text
        for version in range(2, 8):  # one keystroke each, faster than the pause
            typed = typed.replace("scaled = x * SCALE", "scaled = x * SCALE ", 1)
            since = len(harness.published)
            harness.change(uri, version, typed)
            await harness.wait_diagnostics(uri, version, since=since)  # its static layer
        await harness.wait_diagnostics(
            uri, 7, since=len(harness.published), where=lambda ds: True, timeout=60
        )
        rendered = [t for render, t in checked if render]
        assert rendered[-1] == typed
        assert len(rendered) <= 2  # the opened text's (maybe) and the last one's
        assert len([t for render, t in checked if not render]) >= 6
    finally:
        await harness.close()
