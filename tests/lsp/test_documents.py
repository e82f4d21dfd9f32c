"""Document sync, scheduling and diagnostics (push and pull), in process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from kls.lsp import documents
from kls.sandbox import workers
from kls.template import model as model_module
from kls.template.model import parse_template
from tests.lsp.harness import Harness


def find(text: str, needle: str) -> tuple[int, int]:
    at = text.index(needle)
    return text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)


def codes(diagnostics: list[dict[str, object]]) -> list[object]:
    return [d["code"] for d in diagnostics]


async def test_planted_error_has_exact_range(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    text = path.read_text().replace("{{kernel.ptr(Y)}}", "{{kernel.ptr(Z)}}")
    uri = lsp_harness.open(path.as_uri(), text)
    diagnostics = await lsp_harness.wait_diagnostics(uri, 1)
    undefined = [d for d in diagnostics if d["code"] == "KT102"]
    assert undefined, diagnostics
    line, col = find(text, "ptr(Z)")
    assert undefined[0]["range"] == {
        "start": {"line": line, "character": col + 4},
        "end": {"line": line, "character": col + 5},
    }
    assert undefined[0]["source"] == "kls"


async def test_clean_template_then_fix_clears(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    good = path.read_text()
    bad = good.replace("{{template.header().getvalue()}}", "{{template.header()}}")
    uri = lsp_harness.open(path.as_uri(), bad)
    assert codes(await lsp_harness.wait_diagnostics(uri, 1)) == ["KT303"]
    lsp_harness.change(uri, 2, good)
    assert await lsp_harness.wait_diagnostics(uri, 2) == []


async def test_rapid_edits_never_publish_stale(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    good = path.read_text()
    uri = lsp_harness.open(path.as_uri(), good)
    for version in range(2, 30):
        broken = good.replace("{{kernel.ptr(Y)}}", "{{kernel.ptr(" + "Q" * version + ")}}")
        lsp_harness.change(uri, version, broken if version < 29 else good)
        if version % 5 == 0:
            await asyncio.sleep(0.005)  # let some checks start mid-stream
    assert await lsp_harness.wait_diagnostics(uri, 29) == []
    versions = [p["version"] for p in lsp_harness.published if p["uri"] == uri]
    assert versions == sorted(versions), versions
    assert versions[-1] == 29


async def test_edits_during_a_check_are_coalesced(lsp_harness: Harness, workspace: Path) -> None:
    """Ten edits sent at once give one check of the newest text, not ten."""
    path = workspace / "softmax.cu.jinja"
    good = path.read_text()
    uri = lsp_harness.open(path.as_uri(), good)
    await lsp_harness.wait_diagnostics(uri, 1)
    before = len(lsp_harness.published)
    for version in range(2, 12):
        lsp_harness.change(uri, version, good + f"// {version}\n")
    await lsp_harness.wait_diagnostics(uri, 11)
    await asyncio.sleep(documents.IDLE_BEFORE_FULL_CHECK_S + 0.3)  # the full check too
    versions = [p["version"] for p in lsp_harness.published[before:] if p["uri"] == uri]
    assert set(versions) <= {2, 11}, versions  # the first edit starts at once, the rest wait
    assert versions.count(11) <= 2  # the active instance, then all of them


async def test_closing_stops_the_check_and_clears(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text() + "{% if %}\n")
    await lsp_harness.wait_diagnostics(uri, 1)
    lsp_harness.notify(
        lsp.TEXT_DOCUMENT_DID_CLOSE,
        lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)),
    )
    await asyncio.sleep(0)
    assert lsp_harness.published[-1] == {"uri": uri, "diagnostics": []}
    assert uri not in lsp_harness.server.docs
    assert lsp_harness.server.diagnostics.get(uri) == []


async def test_pull_diagnostics(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text() + "{% if %}\n")
    report = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_DIAGNOSTIC,
        lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri)),
    )
    assert report["kind"] == "full"
    assert codes(report["items"]) == ["KT101"]


async def test_pull_and_push_read_one_store(lsp_harness: Harness, workspace: Path) -> None:
    """nvcc's findings come with kls's in both (kls-bench's too: tests/lsp/test_bench.py)."""
    from kls.findings import Finding, Severity
    from kls.positions import Range

    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text() + "{% if %}\n")
    await lsp_harness.wait_diagnostics(uri, 1)
    nvcc = Finding("KT601", Severity.ERROR, Range.of_line(5), "nvcc says", str(path), source="nvcc")
    lsp_harness.server.diagnostics.set(uri, "nvcc", [nvcc])
    report = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_DIAGNOSTIC,
        lsp.DocumentDiagnosticParams(text_document=lsp.TextDocumentIdentifier(uri=uri)),
    )
    assert [(d["source"], d["code"]) for d in report["items"]] == [
        ("kls", "KT101"),
        ("nvcc", "KT601"),
    ]
    lsp_harness.server.publish(uri)
    assert lsp_harness.published[-1]["diagnostics"] == report["items"]


async def test_pull_is_advertised_only_to_a_client_that_asks(lsp_harness: Harness) -> None:
    """A client shown diagnosticProvider pulls as well as taking pushes, and shows each
    finding twice; kls pushes to all and advertises pull on request only."""
    assert lsp_harness.init_result["capabilities"].get("diagnosticProvider") is None
    asking = Harness()
    try:
        result = await asking.initialize("lsp-3.18", {"pullDiagnostics": True})
        assert result["capabilities"]["diagnosticProvider"]["identifier"] == "kls"
    finally:
        await asking.close()


async def test_unknown_document_is_an_error(lsp_harness: Harness) -> None:
    from tests.lsp.harness import LspError

    with pytest.raises(LspError, match="not open"):
        await lsp_harness.request(
            lsp.TEXT_DOCUMENT_DIAGNOSTIC,
            lsp.DocumentDiagnosticParams(
                text_document=lsp.TextDocumentIdentifier(uri="file:///nowhere/x.cu.jinja")
            ),
        )


async def test_watched_config_change_rechecks(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    assert await lsp_harness.wait_diagnostics(uri, 1) == []
    config = workspace / "kls.toml"
    config.write_text(config.read_text().replace("vars = { BLOCK_SIZE = 256 }\n", ""))
    lsp_harness.notify(
        lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
        lsp.DidChangeWatchedFilesParams(
            changes=[lsp.FileEvent(uri=config.as_uri(), type=lsp.FileChangeType.Changed)]
        ),
    )
    found = await lsp_harness.wait_diagnostics(uri, 1, where=bool)
    assert codes(found) == ["KT102"]
    assert "BLOCK_SIZE" in str(found[0]["message"])


async def test_kls_toml_problems_show_in_kls_toml(lsp_harness: Harness, workspace: Path) -> None:
    config = workspace / "kls.toml"
    text = config.read_text().replace('arch = "80"', 'arch = "80"\nbeta = "one"', 1)
    config.write_text(text)
    lsp_harness.open((workspace / "softmax.cu.jinja").as_uri(), "")
    found = await lsp_harness.wait_diagnostics(config.as_uri(), where=bool)
    found = [d for d in found if d["code"] != "KT007"]  # torch-2.11 instances, no source
    assert codes(found) == ["KT002"]
    assert found[0]["range"]["start"]["line"] == text.split("\n").index('beta = "one"')


async def test_a_render_time_config_finding_shows_in_kls_toml(
    lsp_harness: Harness, workspace: Path
) -> None:
    config = workspace / "kls.toml"
    text = config.read_text()
    at = text.index("[instances.sm90_bf16_4096]")
    op = text.index("warpspecialized_cooperative", at)
    config.write_text(text[:op] + "warpspecialized_pingpng" + text[op + 27 :])
    line = text.count("\n", 0, op)
    path = workspace / "cutlass3x_gemm.cu.jinja"
    lsp_harness.open(path.as_uri(), path.read_text())
    found = await lsp_harness.wait_diagnostics(
        config.as_uri(), where=lambda ds: "KT005" in codes(ds)
    )
    unknown = [d for d in found if d["code"] == "KT005"]
    assert len(unknown) == 1 and unknown[0]["range"]["start"]["line"] == line
    assert "pingpong" in str(unknown[0]["message"])  # did you mean


async def test_settings_choose_the_active_instance(lsp_harness: Harness, workspace: Path) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    lsp_harness.configure(activeInstance="softmax_f32_4096x1024")
    for _ in range(100):
        answer = await lsp_harness.request("kls/preview", {"uri": uri})
        if answer["instance"] == "softmax_f32_4096x1024":
            break
        await asyncio.sleep(0.01)
    assert answer["instance"] == "softmax_f32_4096x1024"


async def test_a_failing_check_is_reported_not_fatal(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in a check")

    monkeypatch.setattr(documents, "check_file", broken)
    path = workspace / "softmax.cu.jinja"
    lsp_harness.open(path.as_uri(), path.read_text())
    for _ in range(200):
        logs = [n for n in lsp_harness.notifications if n["method"] == lsp.WINDOW_LOG_MESSAGE]
        if logs:
            break
        await asyncio.sleep(0.01)
    assert "kls check failed: a bug in a check" in logs[0]["params"]["message"]
    monkeypatch.undo()
    symbols = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL,
        lsp.DocumentSymbolParams(text_document=lsp.TextDocumentIdentifier(uri=path.as_uri())),
    )
    assert symbols  # the server still answers


async def test_config_lookup_is_remembered_until_configs_are_forgotten(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kls.lsp import state

    walks: list[Path] = []
    real = state.find_config

    def counted(path: Path) -> Path | None:
        walks.append(path)
        return real(path)

    monkeypatch.setattr(state, "find_config", counted)
    server = lsp_harness.server
    server.forget_configs()
    path = (workspace / "softmax.cu.jinja").resolve()
    for _ in range(3):
        assert server.config_path(path) == workspace / "kls.toml"
    assert walks == [path]
    server.forget_configs()  # kls.toml or a setting changed: look again
    assert server.config_path(path) == workspace / "kls.toml"
    assert walks == [path, path]


async def test_data_edits_then_code_edits_publish_what_a_fresh_check_does(
    lsp_harness: Harness, workspace: Path
) -> None:
    """Edits of template data reuse the compiled code, the parse and the rendered text's
    syntax tree; each publish is still what a fresh server says about that text, and the
    preview is that text's render."""
    path = workspace / "cutlass3x_gemm.cu.jinja"
    good = path.read_text()
    broken = good.replace("{{kernel.check_not_null(X)}}", "{{kernel.check_not_null(Z)}}")
    no_semicolon = good.replace("  CUTLASS_CHECK(status);", "  CUTLASS_CHECK(status)", 1)
    texts = [
        broken,
        broken.replace("// kernel wants; without one", "// kernel wants; lacking one"),  # data only
        good,  # Jinja code
        good.replace("// kernel wants; without one", "// kernel wants: without one {"),  # data only
        no_semicolon,  # data only, and the rendered CUDA no longer parses
        no_semicolon.replace("{{instance_definition}}", "{{ instance_definition }}"),
        good.replace("// The exported entry.", "// The entry point."),
    ]
    uri = lsp_harness.open(path.as_uri(), texts[0])
    seen = [await lsp_harness.wait_diagnostics(uri, 1)]
    previews = [(await lsp_harness.request("kls/preview", {"uri": uri}))["text"]]
    for version, text in enumerate(texts[1:], start=2):
        lsp_harness.change(uri, version, text)
        seen.append(await lsp_harness.wait_diagnostics(uri, version))
        previews.append((await lsp_harness.request("kls/preview", {"uri": uri}))["text"])
    shared = workers._SHARED
    for text, diagnostics, preview in zip(texts, seen, previews, strict=True):
        # A fresh server with nothing cached: its own render worker, no parsed models.
        parse_template.cache_clear()
        model_module._PARSES.clear()
        workers._SHARED = workers.RenderWorkers(keep=1)
        fresh = Harness()
        await fresh.initialize("lsp-3.18")
        try:
            other = fresh.open(path.as_uri(), text)
            assert diagnostics == await fresh.wait_diagnostics(other, 1)
            assert preview == (await fresh.request("kls/preview", {"uri": other}))["text"]
        finally:
            await fresh.close()
            workers._SHARED.close()
            workers._SHARED = shared
    assert "KT102" in codes(seen[0]) and codes(seen[2]) == []
    assert codes(seen[4]) == ["KT501"] == codes(seen[5])
    assert codes(seen[-1]) == []


TRITON = """{{def_kernel("X")}}
    n = {{size("X", 2)}}
    {{store_output(("n",), "x")}}
"""


async def test_a_triton_template_is_served_as_a_template(
    lsp_harness: Harness, tmp_path: Path
) -> None:
    """A `.py.jinja` file (the editor's python-jinja language) gets the Triton profile's
    static findings at the exact token, as a .cu.jinja gets its own."""
    path = tmp_path / "scale.py.jinja"
    path.write_text(TRITON)
    (tmp_path / "kls.toml").write_text(
        '[instances.s]\nprofile = "triton"\ntemplate = "scale.py.jinja"\n'
        'tensors.X = { shape = [64, 8], dtype = "f32" }\n'
        'tensors.out = { shape = [64], dtype = "f32" }\n'
    )
    uri = lsp_harness.open(path.as_uri(), TRITON, language_id="python-jinja")
    diagnostics = await lsp_harness.wait_diagnostics(uri, 1)
    wrong = [d for d in diagnostics if d["code"] == "KT806"]
    assert wrong, diagnostics
    line, col = find(TRITON, "2)}}")
    assert wrong[0]["range"]["start"] == {"line": line, "character": col}
