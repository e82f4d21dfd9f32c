"""Benchmark results in the editor, in process: lens, kls-bench diagnostic (pushed and pulled),
inlay hint, staleness, and a clear message without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.bench_history import remember_run
from tests.conftest import gpu_available
from tests.lsp.harness import Harness, LspError


async def test_remembered_result_shows_as_lens_diagnostic_and_hint(
    lsp_harness: Harness, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text()
    report = remember_run(workspace, "softmax_bf16_8192x4096")
    uri = lsp_harness.open(path.as_uri(), text)
    found = await lsp_harness.wait_diagnostics(uri, 1, source="kls-bench", where=bool)
    assert found[0]["severity"] == lsp.DiagnosticSeverity.Information
    assert found[0]["message"].startswith(report.headline())
    def_line = text[: text.index("kernel.def_kernel")].count("\n")
    assert found[0]["range"]["start"]["line"] == def_line
    # Pull says the same as push (it used to leave kls-bench out).
    pulled = await lsp_harness.request(lsp.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": uri}})
    assert [d for d in pulled["items"] if d["source"] == "kls-bench"] == found

    lenses = await lsp_harness.request(lsp.TEXT_DOCUMENT_CODE_LENS, {"textDocument": {"uri": uri}})
    titles = [lens["command"]["title"] for lens in lenses if "command" in lens]
    assert titles == ["Preview (softmax_bf16_8192x4096)", "Compile"]
    assert all(lens["range"]["start"]["line"] == def_line for lens in lenses)
    lazy = [lens for lens in lenses if "command" not in lens]
    assert [lens["data"]["kind"] for lens in lazy] == ["benchmark"]  # softmax: nothing to tune
    resolved = await lsp_harness.request(lsp.CODE_LENS_RESOLVE, lazy[0])
    assert resolved["command"]["title"] == f"Benchmark · {report.headline()}"
    assert resolved["command"]["command"] == "kls.benchmark"
    hints = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_INLAY_HINT,
        {
            "textDocument": {"uri": uri},
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 200, "character": 0}},
        },
    )
    assert hints[0]["position"]["line"] == def_line
    assert "⏱ 1.62 ms" in hints[0]["label"]

    # An edit that changes the rendered kernel makes the result stale, visibly.
    lsp_harness.change(uri, 2, text.replace("1.0f / row_sum", "2.0f / row_sum"))
    bench = await lsp_harness.wait_diagnostics(uri, 2, source="kls-bench", where=bool)
    assert bench[0]["severity"] == lsp.DiagnosticSeverity.Hint
    assert "stale" in bench[0]["message"]


async def test_failed_run_is_an_error_and_no_hint(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    remember_run(workspace, "softmax_bf16_8192x4096", ok=False)
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    found = await lsp_harness.wait_diagnostics(uri, 1, source="kls-bench", where=bool)
    assert (found[0]["code"], found[0]["severity"]) == ("KT701", lsp.DiagnosticSeverity.Error)
    assert "benchmark failed: wrong result" in found[0]["message"]
    hints = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_INLAY_HINT,
        {
            "textDocument": {"uri": uri},
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}},
        },
    )
    assert hints == []


async def test_lenses_without_an_instance(lsp_harness: Harness, tmp_path: Path) -> None:
    path = tmp_path / "t.cu.jinja"
    text = '{{kernel.def_kernel(inputs=[X], outputs=[Y], names_str="X, Y")}}\n'
    uri = lsp_harness.open(path.as_uri(), text)
    lenses = await lsp_harness.request(lsp.TEXT_DOCUMENT_CODE_LENS, {"textDocument": {"uri": uri}})
    assert lenses[0]["command"]["title"] == "Preview (no instance)"
    lazy = {lens["data"]["kind"]: lens for lens in lenses if "data" in lens}
    resolved = await lsp_harness.request(lsp.CODE_LENS_RESOLVE, lazy["benchmark"])
    assert resolved["command"]["title"] == "Benchmark"
    assert "tune" not in lazy  # no instance: nothing kls tune could tune


async def test_benchmark_without_gpu_is_a_clear_message(
    lsp_harness: Harness, workspace: Path
) -> None:
    if gpu_available()[0]:
        pytest.skip("this machine has a GPU")
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    result = await lsp_harness.command("kls.benchmark", uri)
    assert result["ok"] is False
    assert "no usable NVIDIA GPU/driver" in result["headline"]
    shown = [n for n in lsp_harness.notifications if n["method"] == lsp.WINDOW_SHOW_MESSAGE]
    assert any("no usable NVIDIA GPU/driver" in n["params"]["message"] for n in shown)


async def test_benchmark_arguments(lsp_harness: Harness, tmp_path: Path) -> None:
    with pytest.raises(LspError, match=r"kls.benchmark takes arguments \[uri\]"):
        await lsp_harness.command("kls.benchmark")
    path = tmp_path / "alone.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), "// x\n")
    answer = await lsp_harness.command("kls.benchmark", uri)
    assert answer == {"ok": False, "error": "no instance declares this template in kls.toml"}


async def test_a_triton_template_has_the_lens_and_the_diagnostic(tmp_path: Path) -> None:
    """A Triton template's plain `def_kernel(...)` carries the Benchmark lens and the kls-bench
    diagnostic as `kernel.def_kernel` does (an untrusted workspace: no torch runs, the history
    is read all the same)."""
    from kls.bench.history import History
    from kls.bench.report import BenchReport
    from kls.scaffold import init

    init(tmp_path, "triton")
    report = BenchReport("scale_bf16", True, median_ms=0.0123, spread=0.006, samples=400)
    History(tmp_path).append(report)
    path = tmp_path / "scale.py.jinja"
    text = path.read_text()
    harness = Harness()
    harness.settings = {"workspaceTrusted": False}
    await harness.initialize()
    try:
        uri = harness.open(path.as_uri(), text, language_id="python-jinja")
        found = await harness.wait_diagnostics(uri, 1, source="kls-bench", where=bool)
        def_line = text[: text.index('{{def_kernel("X")}}')].count("\n")
        assert found[0]["range"]["start"]["line"] == def_line
        assert found[0]["message"].startswith(report.headline())
        assert found[0]["code"] == "KT700"
        lenses = await harness.request(lsp.TEXT_DOCUMENT_CODE_LENS, {"textDocument": {"uri": uri}})
        titles = [lens["command"]["title"] for lens in lenses if "command" in lens]
        assert titles == ["Preview (scale_bf16)", "Compile"]
        [lazy] = [lens for lens in lenses if "command" not in lens]
        resolved = await harness.request(lsp.CODE_LENS_RESOLVE, lazy)
        assert resolved["command"]["title"] == f"Benchmark · {report.headline()}"
        assert resolved["range"]["start"]["line"] == def_line
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
        assert [(h["position"]["line"], h["label"].strip()) for h in hints] == [
            (def_line, report.headline())
        ]
    finally:
        await harness.close()
