"""Benchmark results in the editor over stdio: lens, kls-bench diagnostic, inlay hint and
staleness (each also in process: tests/lsp/test_bench.py, with the no-GPU message)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.bench_history import remember_run
from tests.e2e.helpers import change_doc, open_doc, wait_diagnostics


@pytest.mark.asyncio
async def test_remembered_result_shows_as_lens_diagnostic_and_hint(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    report = remember_run(workspace, "softmax_bf16_8192x4096")
    uri = open_doc(client, path)
    found = await wait_diagnostics(client, uri, source="kls-bench", where=bool)
    assert found[0].severity == lsp.DiagnosticSeverity.Information
    assert found[0].message.startswith(report.headline())
    def_line = text[: text.index("kernel.def_kernel")].count("\n")
    assert found[0].range.start.line == def_line
    lenses = await client.text_document_code_lens_async(
        lsp.CodeLensParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    assert lenses is not None
    lazy = [lens for lens in lenses if lens.command is None]
    resolved = await client.code_lens_resolve_async(lazy[0])
    assert resolved.command is not None
    assert resolved.command.title == f"Benchmark · {report.headline()}"
    hints = await client.text_document_inlay_hint_async(
        lsp.InlayHintParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(
                start=lsp.Position(line=0, character=0), end=lsp.Position(line=200, character=0)
            ),
        )
    )
    assert hints and hints[0].position.line == def_line
    assert "⏱ 1.62 ms" in str(hints[0].label)

    # An edit that changes the rendered kernel makes the result stale, visibly.
    change_doc(client, uri, 2, text.replace("1.0f / row_sum", "2.0f / row_sum"))
    bench = await wait_diagnostics(client, uri, 2, source="kls-bench", where=bool)
    assert bench[0].severity == lsp.DiagnosticSeverity.Hint
    assert "stale" in bench[0].message
