"""Tuning from the editor: the Tune command as a job (`kls.lsp.jobs`: work-done progress and
cancel), and the last tune of the active instance (`.kls/tune/<instance>/results.json`, from
the editor or from `kls tune` on the command line) as a kls-tune diagnostic on the def_kernel
line, a lens title and an inlay hint: the winner and its margin over the current op.

Without a GPU the command builds the candidates only (what `kls tune --build-only` does) and
says so in its answer and in the diagnostic. A result is stale once the instance renders
differently from when it was tuned (an edit, or `--apply` changing its op).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from kls.bench.run import source_hash
from kls.compile.run import CompileCancelled
from kls.findings import Finding, Severity
from kls.instances import InstanceSpec
from kls.lsp.convert import end_of_line_hint
from kls.lsp.protocol import TUNE_COMMAND, TuneAnswer, uri_argument
from kls.lsp.state import NO_SETTINGS, KlsServer
from kls.positions import Range
from kls.template.model import TemplateModel, parse_template
from kls.template.source import is_python_file
from kls.tune.results import Choice, ResultsFileError, TuneResult
from kls.tune.results import read_results as load_results

NO_INSTANCE = "no instance declares this template in kls.toml"
NO_GPU = "no GPU here"  # how a build-only run for want of a GPU is told apart (its first note)
# The GPU worker's command (None: `python -m kls.tune.worker`); tests put a stand-in here.
GPU_WORKER: list[str] | None = None


@dataclass(frozen=True)
class TuneView:
    """The last tune of an instance (results.json as read) and whether it is stale."""

    result: TuneResult
    stale: bool = False
    path: str = ""

    # -- what results.json says -------------------------------------------------------------
    @property
    def build_only(self) -> bool:
        return self.result.build_only

    @property
    def no_gpu(self) -> bool:
        return any(str(n).startswith(NO_GPU) for n in self.result.notes)

    @property
    def cancelled(self) -> bool:
        return self.result.cancelled

    @property
    def partial(self) -> bool:
        """A checkpoint: the run was still going (or was killed before it ended)."""
        return self.result.partial

    def _choice(self, choice: Choice | None) -> Choice | None:
        return choice if choice is not None and choice.op else None

    def winner_op(self) -> str | None:
        winner = self._choice(self.result.winner)
        return winner.op if winner else None

    def margin(self) -> float | None:
        """The winner's geometric-mean speed-up over the current op and variables."""
        winner, current = self._choice(self.result.winner), self._choice(self.result.current)
        w = _number(winner.geomean_vs_cublas) if winner else None
        c = _number(current.geomean_vs_cublas) if current else None
        return w / c - 1 if w and c else None

    def _name(self, choice: Choice) -> str:
        """A short name: the op's tile (and family), with its variables."""
        record = next((b for b in self.result.builds if b.unit == choice.unit), None)
        tile = record.tile if record else ""
        name = f"{tile} {record.family if record else ''}".strip() if tile else choice.op
        return f"{name} ({_vars(choice.vars)})" if choice.vars else name

    def _same(self) -> bool:
        winner, current = self._choice(self.result.winner), self._choice(self.result.current)
        return bool(
            winner and current and winner.unit == current.unit and winner.vars == current.vars
        )

    def _built(self) -> str:
        builds = self.result.builds
        ok = sum(1 for b in builds if b.ok is True)
        failed = sum(1 for b in builds if b.ok is False)
        text = f"{ok} of {len(builds)} candidates built"
        return text + (f", {failed} failed" if failed else "")

    # -- in words ---------------------------------------------------------------------------
    def summary(self) -> str:
        """One short line: the lens title and the inlay hint."""
        winner = self._choice(self.result.winner)
        if self.build_only:
            why = "no GPU, built only" if self.no_gpu else "built only"
            text = f"tune ({why}): {self._built()}"
        elif self.partial:
            text = f"tune: running, or stopped before the end ({self._built()})"
        elif winner is None:
            text = "tune: no configuration verified on every shape"
        elif self._same():
            text = f"tune: the current op is the best ({_ratio(winner)} cuBLAS)"
        else:
            margin = self.margin()
            vs = f"{margin:+.1%} vs current" if margin is not None else "current not measured"
            text = f"tune: {self._name(winner)} {vs} · {_ratio(winner)} cuBLAS"
        return self._marks(text)

    def message(self) -> str:
        """The diagnostic: the same, with the full op names and what to do next."""
        instance = self.result.instance or "?"
        winner, current = self._choice(self.result.winner), self._choice(self.result.current)
        if self.build_only:
            if self.no_gpu:
                text = (
                    f"kls tune {instance}: no GPU here, so the candidates were only built "
                    f"(--build-only), not timed: {self._built()}. Tune on a machine with a GPU "
                    "to find the winner."
                )
            else:
                text = f"kls tune {instance} --build-only: {self._built()}."
            failed = next((b for b in self.result.builds if b.ok is False), None)
            if failed is not None and failed.error:
                text += f" First failure: {str(failed.error)[:200]}"
        elif self.partial:
            text = (
                f"kls tune {instance}: partial results of a run that is still going or was "
                f"stopped before it ended ({self._built()}); see {self.path or 'results.json'}."
            )
        elif winner is None:
            text = (
                f"kls tune {instance}: no configuration was verified on every shape "
                f"({self._built()}); see {self.path or 'results.json'}."
            )
        elif self._same():
            text = (
                f"kls tune {instance}: the current op and variables are the best "
                f"({winner.op}, {_vars(winner.vars)}): {_ratio(winner)} "
                "cuBLAS (geometric mean over the shapes)."
            )
        else:
            text = (
                f"kls tune {instance}: winner {winner.op} ({_vars(winner.vars)})"
                f": {_ratio(winner)} cuBLAS (geometric mean over the shapes)"
            )
            margin = self.margin()
            if margin is not None and current is not None:
                text += (
                    f", {margin:+.1%} over the current op {current.op} "
                    f"({_vars(current.vars)}: {_ratio(current)})"
                )
            else:
                text += "; the current op was not measured"
            text += ". `kls tune ... --apply` writes it into kls.toml."
        return self._marks(text)

    def _marks(self, text: str) -> str:
        if self.cancelled:
            text += " (cancelled: partial)"
        if self.stale:
            text += " (stale: the template changed since)"
        return text


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _ratio(choice: Choice) -> str:
    value = _number(choice.geomean_vs_cublas)
    return "-" if value is None else f"{value:.3f}x"


def _vars(values: dict[str, Any] | None) -> str:
    values = values or {}
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "no variables"


# -- reading results.json ---------------------------------------------------------------------

_read: dict[Path, tuple[tuple[int, int], TuneResult | None]] = {}


def results_path(spec: InstanceSpec) -> Path:
    from kls.tune.runner import results_folder

    return results_folder(spec) / "results.json"


def read_results(path: Path) -> TuneResult | None:
    """results.json, read again only when it changed (lenses, hints and every check ask)."""
    try:
        stat = path.stat()
    except OSError:
        _read.pop(path, None)
        return None
    key = (stat.st_mtime_ns, stat.st_size)
    cached = _read.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    result: TuneResult | None
    try:
        result = load_results(path)
    except (OSError, ResultsFileError):
        result = None  # unreadable, not ours, or a newer kls's: show nothing
    _read[path] = (key, result)
    return result


def tune_view(ls: KlsServer, uri: str) -> TuneView | None:
    """The last tune of the active instance, and whether it renders differently since."""
    spec = ls.active_instance(ls.path(uri))
    if spec is None:
        return None
    path = results_path(spec)
    tuned = read_results(path)
    if tuned is None or tuned.instance != spec.name:
        return None
    state = ls.docs.get(uri)
    rendered = state.result.renders.get(spec.name) if state and state.result else None
    stale = bool(
        rendered is not None
        and rendered.text is not None
        and isinstance(tuned.source_hash, str)
        and tuned.source_hash
        and source_hash(rendered.text) != tuned.source_hash
    )
    return TuneView(tuned, stale, str(path))


# -- the diagnostic, lens and hint ------------------------------------------------------------


def tune_finding(view: TuneView, rng: Range, path: str, instance: str) -> Finding:
    severity = Severity.HINT if view.stale else Severity.INFO
    return Finding("KT710", severity, rng, view.message(), path, instance, source="kls-tune")


def tune_findings(ls: KlsServer, uri: str) -> list[Finding]:
    view = tune_view(ls, uri)
    if view is None or uri not in ls.docs or is_python_file(ls.path(uri)):
        return []
    anchors = parse_template(ls.text(uri)).kernel_declarations()
    if not anchors:
        return []
    instance = view.result.instance
    return [tune_finding(view, anchors[0], str(ls.path(uri)), instance)]


def update_findings(ls: KlsServer, uri: str, first: bool = True) -> None:
    """Store the kls-tune finding of `uri` (after every check: the render it is compared with
    changed)."""
    ls.diagnostics.set(uri, "kls-tune", tune_findings(ls, uri))


def resolve_tune_lens(lens: lsp.CodeLens, view: TuneView | None) -> lsp.CodeLens:
    uri = lens.data.get("uri") if isinstance(lens.data, dict) else None
    title = "Tune" if view is None else "Tune" + view.summary().removeprefix("tune")
    lens.command = lsp.Command(title=title, command=TUNE_COMMAND, arguments=[uri])
    return lens


def tune_inlay_hints(model: TemplateModel, view: TuneView | None) -> list[lsp.InlayHint]:
    if view is None:
        return []
    lines = [rng.end.line for rng in model.kernel_declarations()]
    return [end_of_line_hint(n, model.index.line_text(n), f"⚙ {view.summary()}") for n in lines]


# -- the command ------------------------------------------------------------------------------


@dataclass
class _Outcome:
    result: TuneResult
    no_gpu: str = ""  # why no GPU worker started, when the candidates were only built


def run_tune(
    spec: InstanceSpec,
    ls: KlsServer,
    cancel: threading.Event,
    report: Callable[[str], None],
) -> _Outcome:
    """The tune, in a worker thread: timed on the GPU, else (no GPU) built only; results.json
    (and the plot) written unless it was cancelled."""
    from kls.tune.plot import svg
    from kls.tune.results import write_files
    from kls.tune.runner import NoGpu, TuneOptions, Tuner, results_folder

    options = TuneOptions(compile=ls.compile_options("build"), worker=GPU_WORKER)

    def progress(p: Any) -> None:
        report(p.line())

    no_gpu = ""
    try:
        result = Tuner(spec, options, progress, cancel).run()
    except NoGpu as exc:
        if cancel.is_set():
            raise CompileCancelled() from None
        no_gpu = str(exc).split("; to only build")[0]
        report(f"{NO_GPU}: building the candidates only")
        options.build_only = True
        result = Tuner(spec, options, progress, cancel).run()
        result.notes.insert(0, f"{NO_GPU} ({no_gpu}): the candidates were only built")
    if result.cancelled or cancel.is_set():
        raise CompileCancelled()
    write_files(result, results_folder(spec), None if result.build_only else svg(result))
    return _Outcome(result, no_gpu)


async def tune_active(ls: KlsServer, uri: str) -> TuneAnswer:
    from kls.tune.runner import TuneError

    path = ls.path(uri)
    spec = ls.active_instance(path)
    if spec is None:
        return {"ok": False, "error": NO_INSTANCE}

    def work(cancel: threading.Event, report: Callable[[str], None]) -> _Outcome:
        return run_tune(spec, ls, cancel, report)

    try:
        outcome = await ls.jobs.run(f"tune:{path}", f"kls tune {spec.name}", work)
    except (asyncio.CancelledError, CompileCancelled):
        return {"ok": False, "cancelled": True, "instance": spec.name}
    except TuneError as exc:
        if str(exc) == "cancelled":
            return {"ok": False, "cancelled": True, "instance": spec.name}
        ls.window_show_message(
            lsp.ShowMessageParams(type=lsp.MessageType.Error, message=f"kls tune: {exc}")
        )
        return {"ok": False, "instance": spec.name, "error": str(exc)}
    result = outcome.result
    view = TuneView(result, path=result.files.get("json", ""))
    for open_uri in ls.uris_of(path):
        if open_uri in ls.docs:
            update_findings(ls, open_uri)
            ls.publish(open_uri)
    ls.refresh_lenses()
    _refresh_inlay_hints(ls)
    headline = view.summary()
    if outcome.no_gpu:
        headline = f"{NO_GPU}: built the candidates only, not timed ({view._built()})"
    ok = result.builds_ok > 0 if result.build_only else result.winner is not None
    return {
        "ok": ok,
        "instance": spec.name,
        "build_only": result.build_only,
        "headline": headline,
        "winner": view.winner_op(),
        "margin": view.margin(),
        "results": result.files.get("json", ""),
    }


def _refresh_inlay_hints(ls: KlsServer) -> None:
    workspace = ls.client_capabilities.workspace
    hints = workspace.inlay_hint if workspace else None
    if hints is not None and hints.refresh_support:
        ls.workspace_inlay_hint_refresh(None)


async def tune_command(ls: KlsServer, *args: Any) -> TuneAnswer:
    uri = uri_argument(args, TUNE_COMMAND)
    if not await ls.wait_for_settings():
        return {"ok": False, "error": NO_SETTINGS}
    await ls.load_config(ls.path(uri))
    return await tune_active(ls, uri)


def register(ls: KlsServer) -> None:
    ls.command(TUNE_COMMAND)(tune_command)
    ls.after_check.append(update_findings)
