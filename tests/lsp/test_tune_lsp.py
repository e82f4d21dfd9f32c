"""Tuning in the editor, in process: the Tune lens, the kls.tune command (work-done progress,
the kls-tune diagnostic and inlay hint from its results, build-only without a GPU, cancel), and
a results.json written by `kls tune` on the command line shown the same way. Builds are
stand-ins (no nvcc) and the GPU worker is tests/core/tune_fake_worker.py (no GPU in CI)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp

import kls.compile
import kls.tune.executors as executors
from kls.instances import load_instances
from kls.lsp import tune as lsp_tune
from kls.tune.results import write_files
from kls.tune.runner import TuneOptions, Tuner, results_folder
from tests.lsp.harness import Harness
from tests.upstream import needs_torch_source, require_torch_source

# The SM80 instance renders torch 2.11's own 2.x templates, written into the workspace at test
# time from the torch source (never stored).
pytestmark = needs_torch_source

ROOT = Path(__file__).resolve().parent.parent
FAKE_WORKER = [sys.executable, str(ROOT / "core" / "tune_fake_worker.py")]
NO_GPU_WORKER = [sys.executable, "-c", "import sys; sys.exit(3)"]
SM80 = "torch211_sm80_bf16_4096"
TEMPLATE = "gemm_cutlass2x.cu.jinja"
ARGS = "gemm_args_cutlass2x.cuh.jinja"
GEMM_PY = "_inductor/codegen/cutlass/gemm_template.py"
EVERYWHERE = {"start": {"line": 0, "character": 0}, "end": {"line": 500, "character": 0}}


@pytest.fixture(autouse=True)
def upstream_2x_templates(workspace: Path) -> None:
    """torch 2.11's GEMM_TEMPLATE_CUTLASS_2X / GEMM_ARGS_CUTLASS_2X as files of the workspace,
    which the shipped torch211_* instances name instead of their `torch:` references."""
    from kls.template.source import read_source

    py = require_torch_source().package / GEMM_PY
    prefix = f"torch:{GEMM_PY}::"
    config = workspace / "kls.toml"
    text = config.read_text()
    for name, constant in ((TEMPLATE, "GEMM_TEMPLATE_CUTLASS_2X"), (ARGS, "GEMM_ARGS_CUTLASS_2X")):
        (workspace / name).write_text(read_source(f"{py}::{constant}").text)
        text = text.replace(f'"{prefix}{constant}"', f'"{name}"')
    config.write_text(text)


@pytest.fixture(autouse=True)
def no_earlier_tunes(workspace: Path) -> None:
    """The copied templates may hold a tune run there (CI's --build-only): start without."""
    shutil.rmtree(workspace / ".kls" / "tune", ignore_errors=True)


@pytest.fixture
def fake_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Every candidate 'builds' at once into a stand-in library; returns the ids built."""
    built: list[str] = []

    def build(task: executors.BuildTask, cancel: object = None) -> executors.BuildOutcome:
        lib = tmp_path / f"fake_{task.id}.so"
        lib.write_bytes(task.id.encode())
        built.append(task.id)
        return executors.BuildOutcome(task.id, True, seconds=0.01, artifact=str(lib))

    monkeypatch.setattr(executors, "build_task", build)
    return built


async def open_sm80(harness: Harness, workspace: Path) -> tuple[str, str, int]:
    """The torch-2.11 SM80 GEMM template with its tuned instance active; its signature line."""
    path = workspace / TEMPLATE
    text = path.read_text()
    uri = harness.open(path.as_uri(), text)
    answer = await harness.command("kls.selectInstance", uri, SM80)
    assert answer["active"] == SM80
    await harness.wait_diagnostics(uri, 1)
    line = text[: text.index("{{kernel_call_signature}}")].count("\n")
    return uri, text, line


async def tune_lens_title(harness: Harness, uri: str, line: int) -> str:
    lenses = await harness.request(lsp.TEXT_DOCUMENT_CODE_LENS, {"textDocument": {"uri": uri}})
    tune = [lens for lens in lenses if lens.get("data", {}).get("kind") == "tune"]
    assert len(tune) == 1 and tune[0]["range"]["start"]["line"] == line
    resolved = await harness.request(lsp.CODE_LENS_RESOLVE, tune[0])
    assert resolved["command"]["command"] == "kls.tune"
    assert resolved["command"]["arguments"] == [uri]
    return str(resolved["command"]["title"])


async def hints(harness: Harness, uri: str) -> list[str]:
    found = await harness.request(
        lsp.TEXT_DOCUMENT_INLAY_HINT, {"textDocument": {"uri": uri}, "range": EVERYWHERE}
    )
    return [h["label"] for h in found]


async def test_tune_lens_beside_the_others(lsp_harness: Harness, workspace: Path) -> None:
    uri, _text, line = await open_sm80(lsp_harness, workspace)
    lenses = await lsp_harness.request(lsp.TEXT_DOCUMENT_CODE_LENS, {"textDocument": {"uri": uri}})
    # On the signature line of a torch-2.11 GEMM (no def_kernel call there): all four lenses.
    assert {lens["range"]["start"]["line"] for lens in lenses} == {line}
    assert [lens["command"]["title"] for lens in lenses if "command" in lens] == [
        f"Preview ({SM80})",
        "Compile",
    ]
    assert [lens["data"]["kind"] for lens in lenses if "data" in lens] == ["benchmark", "tune"]
    assert await tune_lens_title(lsp_harness, uri, line) == "Tune"  # no tune yet
    # And above def_kernel in the older API's GEMM templates; not above a kernel that is no
    # CUTLASS GEMM (kls tune would only answer "nothing to tune").
    for name, kinds in (("cutlass3x_gemm", ["benchmark", "tune"]), ("softmax", ["benchmark"])):
        path = workspace / f"{name}.cu.jinja"
        other = lsp_harness.open(path.as_uri(), path.read_text())
        lenses = await lsp_harness.request(
            lsp.TEXT_DOCUMENT_CODE_LENS, {"textDocument": {"uri": other}}
        )
        assert [lens["data"]["kind"] for lens in lenses if "data" in lens] == kinds, name


async def tune_sm80(
    harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch, worker: list[str]
) -> tuple[str, int, int, Any]:
    """Open the SM80 template, run kls.tune on it with `worker` as the GPU worker: its uri,
    signature line, the publish count before the tune, and the command's answer."""
    monkeypatch.setattr(lsp_tune, "GPU_WORKER", worker)
    uri, _text, line = await open_sm80(harness, workspace)
    mark = len(harness.published)
    return uri, line, mark, await harness.command("kls.tune", uri)


async def test_tune_command_publishes_winner_and_margin(
    lsp_harness: Harness,
    workspace: Path,
    fake_builds: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uri, line, mark, answer = await tune_sm80(lsp_harness, workspace, monkeypatch, FAKE_WORKER)
    assert answer["ok"] is True and answer["instance"] == SM80
    assert answer["build_only"] is False and answer["winner"]
    assert len(fake_builds) == 22  # the SM80 space: every `_tn_align8` op, the current among them
    results = Path(answer["results"])
    assert results == results_folder(spec(workspace)) / "results.json" and results.is_file()
    assert (results.parent / "plot.svg").is_file()
    data = json.loads(results.read_text())
    assert data["winner"]["op"] == answer["winner"] and data["source_hash"]

    def final(found: list[dict[str, Any]]) -> bool:  # (a check during the tune shows its
        return bool(found) and "partial results" not in found[0]["message"]  # checkpoint)

    found = await lsp_harness.wait_diagnostics(uri, source="kls-tune", where=final, since=mark)
    (diagnostic,) = found
    assert diagnostic["severity"] == lsp.DiagnosticSeverity.Information
    assert diagnostic["code"] == "KT710" and diagnostic["range"]["start"]["line"] == line
    message = diagnostic["message"]
    assert message.startswith(f"kls tune {SM80}: ")
    if answer["margin"] is None:  # the current op won
        assert "the current op and variables are the best" in message
    else:
        assert f"winner {answer['winner']}" in message
        assert f"{answer['margin']:+.1%} over the current op" in message
    assert "cuBLAS" in message and "stale" not in message

    labels = await hints(lsp_harness, uri)
    assert len(labels) == 1 and labels[0].startswith(" ⚙ tune: ") and "cuBLAS" in labels[0]
    title = await tune_lens_title(lsp_harness, uri, line)
    assert title.startswith("Tune: ") and "cuBLAS" in title
    # Work-done progress: begun, reported (the tuner's progress line), ended.
    progress = [
        n["params"]["value"] for n in lsp_harness.notifications if n["method"] == "$/progress"
    ]
    assert progress[0]["kind"] == "begin" and progress[0]["title"] == f"kls tune {SM80}"
    assert any(p["kind"] == "report" and "builds" in p.get("message", "") for p in progress)
    assert progress[-1] == {"kind": "end", "message": "done"}
    pulled = await lsp_harness.request(lsp.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": uri}})
    assert [d for d in pulled["items"] if d["source"] == "kls-tune"] == found


async def test_without_a_gpu_it_builds_only_and_says_so(
    lsp_harness: Harness,
    workspace: Path,
    fake_builds: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uri, line, mark, answer = await tune_sm80(lsp_harness, workspace, monkeypatch, NO_GPU_WORKER)
    assert answer["ok"] is True and answer["build_only"] is True
    assert answer["headline"].startswith("no GPU here: built the candidates only, not timed")
    assert answer["winner"] is None and answer["margin"] is None
    assert len(fake_builds) == 22
    (diagnostic,) = await lsp_harness.wait_diagnostics(
        uri, source="kls-tune", where=bool, since=mark
    )
    assert diagnostic["severity"] == lsp.DiagnosticSeverity.Information
    assert diagnostic["range"]["start"]["line"] == line
    assert (
        "no GPU here, so the candidates were only built (--build-only), not timed"
        in (diagnostic["message"])
    )
    assert "22 of 22 candidates built" in diagnostic["message"]
    assert (await hints(lsp_harness, uri))[0].startswith(" ⚙ tune (no GPU, built only): 22 of 22")


async def test_cancel_stops_the_builds(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kls.cancel reaches the executor: the running builds see their cancel event set (the
    real compile kills nvcc's process group on it), no other build starts, nothing is written."""
    monkeypatch.setattr(lsp_tune, "GPU_WORKER", NO_GPU_WORKER)
    started = threading.Event()
    seen: list[threading.Event] = []

    def compile_instance(spec: Any, options: Any, overrides: Any, cancel: Any, **_: Any) -> Any:
        seen.append(cancel)
        started.set()
        while not cancel.wait(0.01):
            pass
        raise kls.compile.CompileCancelled()

    monkeypatch.setattr(kls.compile, "compile_instance", compile_instance)
    uri, _text, _line = await open_sm80(lsp_harness, workspace)
    task = asyncio.ensure_future(lsp_harness.command("kls.tune", uri))
    for _ in range(3000):
        if started.is_set():
            break
        await asyncio.sleep(0.01)
    assert started.is_set()
    assert await lsp_harness.command("kls.cancel", uri) == {"cancelled": ["tune"]}
    answer = await asyncio.wait_for(task, 10)
    assert answer == {"ok": False, "cancelled": True, "instance": SM80}
    assert seen and all(event.is_set() for event in seen)
    assert len(seen) <= lsp_harness.server.jobs.limit * 2  # not all 22: the rest never started
    assert not (results_folder(spec(workspace)) / "results.json").exists()
    assert lsp_harness.server.jobs.running == {}
    progress = [n for n in lsp_harness.notifications if n["method"] == "$/progress"]
    assert progress[-1]["params"]["value"] == {"kind": "end", "message": "cancelled"}


async def test_a_command_line_tune_shows_and_goes_stale(
    lsp_harness: Harness,
    workspace: Path,
    fake_builds: list[str],
) -> None:
    """results.json from `kls tune` (what its command writes) shows in the editor as soon as
    the template opens; an edit that changes the render marks it stale."""
    result = Tuner(spec(workspace), TuneOptions(worker=FAKE_WORKER, slots=2)).run()
    write_files(result, results_folder(spec(workspace)), None)
    assert result.winner is not None
    uri, text, line = await open_sm80(lsp_harness, workspace)
    (diagnostic,) = await lsp_harness.wait_diagnostics(uri, source="kls-tune", where=bool)
    assert diagnostic["range"]["start"]["line"] == line
    assert diagnostic["severity"] == lsp.DiagnosticSeverity.Information
    assert result.winner.op in diagnostic["message"] or "are the best" in diagnostic["message"]
    assert (await hints(lsp_harness, uri))[0].startswith(" ⚙ tune: ")
    assert (await tune_lens_title(lsp_harness, uri, line)).startswith("Tune: ")

    lsp_harness.change(uri, 2, text.replace("int B = ", "int  B = "))
    (stale,) = await lsp_harness.wait_diagnostics(uri, 2, source="kls-tune", where=bool)
    assert stale["severity"] == lsp.DiagnosticSeverity.Hint
    assert "(stale: the template changed since)" in stale["message"]
    assert (await hints(lsp_harness, uri))[0].endswith("(stale: the template changed since)")


async def test_tune_arguments_and_no_instance(lsp_harness: Harness, tmp_path: Path) -> None:
    from tests.lsp.harness import LspError

    with pytest.raises(LspError, match=r"kls.tune takes arguments \[uri\]"):
        await lsp_harness.command("kls.tune")
    uri = lsp_harness.open((tmp_path / "alone.cu.jinja").as_uri(), "// x\n")
    answer = await lsp_harness.command("kls.tune", uri)
    assert answer == {"ok": False, "error": "no instance declares this template in kls.toml"}


def spec(workspace: Path) -> Any:
    return load_instances(workspace / "kls.toml").instances[SM80]


def test_a_checkpoint_reads_as_partial_not_as_a_failed_tune() -> None:
    """results.json written mid-run (the tune checkpoints after stage 1) has no winner yet:
    the editor must not say the tune verified nothing."""
    from kls.lsp.tune import TuneView
    from kls.tune.results import BuildRecord, TuneResult

    builds = [
        BuildRecord(u, "op", "", "sm80", "", {}, ok=ok) for u, ok in (("a", True), ("b", False))
    ]
    view = TuneView(TuneResult(SM80, "t", "c", "local", 0.0, [], builds=builds, partial=True))
    assert "partial results of a run that is still going" in view.message()
    assert "no configuration" not in view.message() + view.summary()
    assert (
        view.summary()
        == "tune: running, or stopped before the end (1 of 2 candidates built, 1 failed)"
    )
    done = TuneView(TuneResult(SM80, "t", "c", "local", 0.0, [], builds=builds), path="r.json")
    assert "no configuration was verified" in done.message()
