"""Open documents and their checks: sync, scheduling, push and pull diagnostics, settings.

Checks run off the event loop. Edits are coalesced per document: an edit starts a check at once
if none is running; edits that arrive during a check make it run again on the newest text when
it ends. A result is stored (and published) only if the document did not change while it was
computed, so an older result never replaces a newer one.

The first result for a text covers the static checks and the *active* instance; the other
instances follow once edits pause for IDLE_BEFORE_FULL_CHECK_S (a newer edit at any point starts
over).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from kls.checks.run import CheckResult, ModelCache, check_file
from kls.findings import Finding
from kls.instances import InstanceSet, InstanceSpec
from kls.lsp import config_documents
from kls.lsp.convert import to_diagnostic
from kls.lsp.offload import off_loop
from kls.lsp.settings import Settings
from kls.lsp.state import DocState, KlsServer
from kls.profiles import profile
from kls.sandbox.workers import start_isolated

IDLE_BEFORE_FULL_CHECK_S = 0.15


@dataclass(frozen=True)
class TemplateText:
    """One template a document holds. Today a document is one template file; a Python file
    holding template string constants (`file.py::CONSTANT`) will hold several, which is why
    checks go through `templates_of`."""

    path: Path
    text: str


def templates_of(ls: KlsServer, uri: str) -> list[TemplateText]:
    return [TemplateText(ls.path(uri), ls.text(uri))]


def check_document(
    ls: KlsServer,
    uri: str,
    templates: list[TemplateText],
    overrides: dict[Path, str],
    instances: InstanceSet | None,
    only: set[str] | None = None,
    generation: int | None = None,
    render: bool = True,
) -> CheckResult:
    """Check the templates of `uri` (taken with `overrides` on the event loop; this runs in a
    worker thread). With `generation`, stop early once the document has moved past it; with
    `render` False, the static checks only (of `only`'s instances too)."""

    def superseded() -> bool:
        state = ls.docs.get(uri)
        return generation is not None and (state is None or state.generation != generation)

    merged = CheckResult()
    for template in templates:
        cache = ModelCache(overrides)
        if only is not None and instances is not None and render:
            # The interactive check's render is sent to a worker process now, from this
            # thread; the worker renders while this thread parses the template and runs the
            # static checks.
            for spec in instances.depends_on(template.path):
                # (not a torch-rendered one: its render is the torch worker's, which a render
                # sandbox's memory limit would not let start)
                if spec.name in only and not _renders_in_torch(spec):
                    cache.started[spec.name] = start_isolated(spec, cache.overrides)
        try:
            result = check_file(
                template.path,
                template.text,
                instances,
                cache,
                only,
                superseded if generation is not None else None,
                render,
            )
        finally:
            for pending in cache.started.values():  # not taken: superseded or failed
                pending.abandon()
        merged.findings.extend(result.findings)
        merged.config_findings.extend(result.config_findings)
        merged.renders.update(result.renders)
        merged.cancelled = merged.cancelled or result.cancelled
    return merged


def _check_off_loop(
    ls: KlsServer,
    uri: str,
    instances: InstanceSet | None,
    only: set[str] | None = None,
    generation: int | None = None,
    render: bool = True,
) -> Coroutine[Any, Any, CheckResult]:
    """`check_document` of the document's current text in the offload pool; the text and the
    overrides are taken now, on the event loop, not when the check starts."""
    return off_loop(
        check_document,
        ls,
        uri,
        templates_of(ls, uri),
        ls.overrides(),
        instances,
        only,
        generation,
        render,
    )


def schedule(ls: KlsServer, uri: str, version: int) -> None:
    """Check now if no check of this document runs; else the running one re-checks the
    newest version when it ends. No timer delay, no stale publish, one check at a time."""
    state = ls.docs.setdefault(uri, DocState())
    state.version = version
    state.generation += 1  # an edit, a save, a config or sub-template change
    state.changed.set()
    if state.task is None or state.task.done():
        state.task = asyncio.get_running_loop().create_task(_check_loop(ls, uri))


def schedule_all(ls: KlsServer) -> None:
    for uri, state in list(ls.docs.items()):
        schedule(ls, uri, state.version)


async def _check_loop(ls: KlsServer, uri: str) -> None:
    while (state := ls.docs.get(uri)) is not None:
        generation = state.generation
        path = ls.path(uri)
        instances = await ls.load_config(path)
        active = ls.active_instance(path)
        phases: list[set[str] | None] = [None]
        if active is not None and len(ls.instances_of(path)) > 1:
            phases = [{active.name}, None]
        if active is not None and renders_slowly(ls, active):
            if not await _static_then_render(ls, uri, instances, active.name):
                return  # closed, or the check failed (reported)
            state = ls.docs.get(uri)
            if state is None or len(phases) == 1 or state.result_complete:
                return
            generation = state.generation
            if not await _quiet(ls, uri, generation):
                continue  # edits keep coming: the static layer and the render first again
            phases = [None]  # the other instances, now that edits pause
        for only in phases:
            if only is None and len(phases) > 1 and not await _quiet(ls, uri, generation):
                break  # edits keep coming: the interactive phase comes first again
            if state.up_to_date and state.result_complete:
                continue  # a pull checked this text in full meanwhile
            try:
                result = await _check_off_loop(ls, uri, instances, only, generation)
            except Exception as exc:
                ls.report_failure("check", exc)
                return
            state = ls.docs.get(uri)
            if state is None:
                return  # closed meanwhile
            if state.generation != generation:
                break  # superseded while running: check the newest inputs instead
            _store(ls, uri, state, result, complete=only is None)
        else:
            return


def _renders_in_torch(spec: InstanceSpec) -> bool:
    """Whether Inductor renders the instance, in the torch worker (a Triton template)."""
    try:
        return profile(spec.profile).language == "python"
    except KeyError:
        return False


def renders_slowly(ls: KlsServer, spec: InstanceSpec) -> bool:
    """Whether the instance's render runs torch (a Triton template in a trusted workspace):
    hundreds of milliseconds, so its static checks are published before it."""
    return _renders_in_torch(spec) and ls.settings_known and ls.settings.workspace_trusted


async def _static_then_render(
    ls: KlsServer, uri: str, instances: InstanceSet | None, active: str
) -> bool:
    """For a torch-rendered instance: the static layer of each new text at once, and, once
    edits pause for IDLE_BEFORE_FULL_CHECK_S, one render at a time of the active instance,
    which a newer edit does not wait for (its static layer is published while the render
    goes on; a render of an older text is then followed by one of the newest). True once the
    current text's render is stored."""
    render: asyncio.Future[CheckResult] | None = None
    rendered_generation = published = -1
    while (state := ls.docs.get(uri)) is not None:
        generation = state.generation
        state.changed.clear()
        if published != generation:
            if await _static_first(ls, uri, generation, instances, active) is None:
                continue  # an edit meanwhile
            published = generation
        if render is None:
            if not await _quiet(ls, uri, generation):
                continue  # still typing: no torch render of a text about to change
            rendered_generation = generation
            render = asyncio.ensure_future(
                _check_off_loop(ls, uri, instances, {active}, generation)
            )
        changed = asyncio.ensure_future(state.changed.wait())
        waiting: list[asyncio.Future[Any]] = [render, changed]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        changed.cancel()
        if not render.done():
            continue  # a newer edit: its static layer now, while the render goes on
        try:
            result = render.result()
        except Exception as exc:
            ls.report_failure("check", exc)
            return False
        render = None
        state = ls.docs.get(uri)
        if state is not None and state.generation == rendered_generation:
            _store(ls, uri, state, result, complete=len(ls.instances_of(ls.path(uri))) <= 1)
            return True
    if render is not None:
        render.cancel()
    return False


async def _static_first(
    ls: KlsServer, uri: str, generation: int, instances: InstanceSet | None, active: str
) -> CheckResult | None:
    """Publish the static layer of the current text at once: its static checks and the
    active instance's, with the last render's own findings kept until the new render's
    arrive (no flicker); None when the document moved on meanwhile."""
    result = await _check_off_loop(ls, uri, instances, {active}, generation, render=False)
    state = ls.docs.get(uri)
    if state is None or state.generation != generation:
        return None
    state.static_result, state.static_generation = result, generation
    ls.diagnostics.set(uri, "kls", [*result.findings, *state.render_layer])
    ls.publish(uri)
    return result


def _store(ls: KlsServer, uri: str, state: DocState, result: CheckResult, complete: bool) -> None:
    if state.static_result is not None and state.static_generation == state.generation:
        static = state.static_result.findings  # the rest is the render's, for the next edit
        state.render_layer = [f for f in result.findings if f not in static]
    state.static_result = None
    first = not state.up_to_date
    state.result = result
    state.result_generation = state.generation
    state.result_complete = complete
    ls.checked(uri, result, first)
    global _FROZEN
    if not _FROZEN:
        _FROZEN = True
        asyncio.get_running_loop().call_soon(_freeze)


_FROZEN = False


def _freeze() -> None:
    """After the first check: what it built to stay (Jinja environments, compiled code,
    lsprotocol's converters) is left out of later garbage collections, as the imports are
    (kls.lsp.server), so a full collection while typing walks only what edits made. (No
    collection first: it held the event loop ~10 ms just when the first edits arrive; the
    few cycles the first check left stay.)"""
    gc.freeze()


async def _quiet(ls: KlsServer, uri: str, generation: int) -> bool:
    """Wait until no trigger arrived for IDLE_BEFORE_FULL_CHECK_S (True), or one did."""
    state = ls.docs.get(uri)
    if state is None:
        return False
    state.changed.clear()
    if state.generation != generation:
        return False
    try:
        await asyncio.wait_for(state.changed.wait(), IDLE_BEFORE_FULL_CHECK_S)
    except asyncio.TimeoutError:
        return True
    return False


# -- handlers ---------------------------------------------------------------------------------


async def initialized(ls: KlsServer, params: lsp.InitializedParams) -> None:
    known = ls.settings_known  # from initializationOptions
    if await ls.pull_settings() and not known:
        schedule_all(ls)  # documents opened meanwhile were checked with lint only


async def configuration_changed(ls: KlsServer, params: lsp.DidChangeConfigurationParams) -> None:
    """Pull the settings again; a client that cannot answer workspace/configuration may send
    them here (`{"kls": {...}}`), and until one of the two arrives kls only lints."""
    if not await ls.pull_settings() and isinstance(params.settings, dict):
        # The client pushed its settings: `{"kls": {...}}`, or none of kls's (Neovim sends
        # its `settings`, often {}): either way they have arrived, and the defaults hold.
        pushed = params.settings.get("kls")
        ls.apply_settings(Settings.from_client(pushed if isinstance(pushed, dict) else None))
    schedule_all(ls)


def did_open(ls: KlsServer, params: lsp.DidOpenTextDocumentParams) -> None:
    _opened_or_changed(ls, params.text_document.uri, params.text_document.version)


def did_change(ls: KlsServer, params: lsp.DidChangeTextDocumentParams) -> None:
    _opened_or_changed(ls, params.text_document.uri, params.text_document.version)


def _opened_or_changed(ls: KlsServer, uri: str, version: int) -> None:
    if config_documents.handles(ls, uri):  # a config, not a template: its op lists, no check
        ls.docs.setdefault(uri, DocState()).version = version
        config_documents.warm(ls, uri)
        return
    schedule(ls, uri, version)


async def did_save(ls: KlsServer, params: lsp.DidSaveTextDocumentParams) -> None:
    uri = params.text_document.uri
    state = ls.docs.get(uri)
    schedule(ls, uri, state.version if state else 0)
    for hook in ls.after_save:
        await hook(ls, uri)


def did_close(ls: KlsServer, params: lsp.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    state = ls.forget(uri)
    if state and state.task:
        state.task.cancel()
    ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def watched_files_changed(ls: KlsServer, params: lsp.DidChangeWatchedFilesParams) -> None:
    ls.forget_configs()  # kls.toml or a sub-template changed: re-read, re-check open docs
    schedule_all(ls)


async def pull_diagnostics(
    ls: KlsServer, params: lsp.DocumentDiagnosticParams
) -> lsp.DocumentDiagnosticReport:
    """The store's diagnostics of a document, after a full check of its current text (the
    last one when it is up to date and complete, else a new one)."""
    uri = params.text_document.uri
    ls.text(uri)  # an error for a document that is not open
    state = ls.docs[uri]
    if not (state.up_to_date and state.result_complete):
        generation = state.generation
        instances = await ls.load_config(ls.path(uri))
        result = await _check_off_loop(ls, uri, instances)
        current = ls.docs.get(uri)
        if current is None or current.generation != generation:
            # Edited meanwhile: answer for the text that was checked (the newer one follows).
            others = [
                f for s in ls.diagnostics.SOURCES if s != "kls" for f in ls.diagnostics.get(uri, s)
            ]
            return _report([*result.findings, *others])
        if not (current.up_to_date and current.result_complete):
            _store(ls, uri, current, result, complete=True)
    return lsp.RelatedFullDocumentDiagnosticReport(items=ls.diagnostics.diagnostics(uri))


def _report(findings: list[Finding]) -> lsp.RelatedFullDocumentDiagnosticReport:
    return lsp.RelatedFullDocumentDiagnosticReport(items=[to_diagnostic(f) for f in findings])


def register(ls: KlsServer) -> None:
    ls.feature(lsp.INITIALIZED)(initialized)
    ls.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)(configuration_changed)
    ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)(did_open)
    ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)(did_change)
    ls.feature(lsp.TEXT_DOCUMENT_DID_SAVE)(did_save)
    ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)(did_close)
    ls.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)(watched_files_changed)
    ls.feature(
        lsp.TEXT_DOCUMENT_DIAGNOSTIC,
        lsp.DiagnosticOptions(
            identifier="kls", inter_file_dependencies=True, workspace_diagnostics=False
        ),
    )(pull_diagnostics)
