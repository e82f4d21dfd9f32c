"""Robustness: thousands of random edits (half-typed tags, stray quotes, deleting everything)
through the real protocol; the server must keep answering and never crash."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from tests.conftest import TEMPLATES

FRAGMENTS = [
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    "{%-",
    "-%}",
    '"',
    "'",
    "(",
    ")",
    "[",
    "]",
    ",",
    "kernel.",
    "template.",
    "kernel.ptr(",
    "kernel.def_kernel(",
    "X",
    "W",
    "Bias",
    "Y",
    "names_str=",
    "input_reorder=[2, 0, 1]",
    "\n",
    " ",
    "{% for i in range(3) %}",
    "{% endfor %}",
    "{% if X %}",
    "{% endif %}",
    "\\",
    "\t",
    "é",
    "<<<",
    ">>>",
]

Edit = tuple[float, float, str]
edits = st.tuples(
    st.floats(0, 1),
    st.floats(0, 1),
    st.lists(st.sampled_from(FRAGMENTS), max_size=4).map("".join),
)


def apply(text: str, edit: Edit) -> tuple[str, lsp.Range, str]:
    """Turn (where, how much to delete, insertion) into new text and the LSP range edited."""
    where, amount, insert = edit
    start = int(where * len(text))
    end = min(len(text), start + int(amount * amount * 200))
    if amount > 0.98:  # now and then, delete everything
        start, end = 0, len(text)

    def pos(offset: int) -> lsp.Position:
        line = text.count("\n", 0, offset)
        return lsp.Position(line=line, character=offset - (text.rfind("\n", 0, offset) + 1))

    rng = lsp.Range(start=pos(start), end=pos(end))
    return text[:start] + insert + text[end:], rng, insert


async def drive(sequence: list[Edit], template: Path) -> None:
    client = LanguageClient("robustness", "1")
    await client.start_io(sys.executable, "-m", "kls.cli", "serve")
    try:
        await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
        client.initialized(lsp.InitializedParams())
        uri = template.as_uri()
        text = template.read_text()
        client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                text_document=lsp.TextDocumentItem(uri=uri, language_id="c", version=1, text=text)
            )
        )
        doc = lsp.TextDocumentIdentifier(uri=uri)
        for version, edit in enumerate(sequence, start=2):
            text, rng, insert = apply(text, edit)
            client.text_document_did_change(
                lsp.DidChangeTextDocumentParams(
                    text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[lsp.TextDocumentContentChangePartial(range=rng, text=insert)],
                )
            )
            if version % 25 == 0:  # the server keeps answering while edits stream in
                where = lsp.Position(line=0, character=0)
                await asyncio.wait_for(
                    client.text_document_hover_async(
                        lsp.HoverParams(text_document=doc, position=where)
                    ),
                    20,
                )
                await asyncio.wait_for(
                    client.text_document_completion_async(
                        lsp.CompletionParams(text_document=doc, position=where)
                    ),
                    20,
                )
        symbols = await asyncio.wait_for(
            client.text_document_document_symbol_async(lsp.DocumentSymbolParams(text_document=doc)),
            20,
        )
        assert symbols is not None
        report = await asyncio.wait_for(
            client.text_document_diagnostic_async(lsp.DocumentDiagnosticParams(text_document=doc)),
            30,
        )
        assert isinstance(report, lsp.RelatedFullDocumentDiagnosticReport)
        await client.shutdown_async(None)
        client.exit(None)
    finally:
        await client.stop()


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(sequence=st.lists(edits, min_size=400, max_size=400))
def test_thousands_of_random_edits_never_crash_the_server(sequence: list[Edit]) -> None:
    asyncio.run(drive(sequence, TEMPLATES / "cutlass3x_gemm.cu.jinja"))
