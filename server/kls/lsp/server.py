"""`kls serve`: the pygls 2 language server.

Checks run in a worker thread (never on the event loop), debounced per document; a result is
published only if the document has not changed since the check started, so an older result never
replaces a newer one.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from kls import __version__
from kls.checks.run import CheckResult, ModelCache, check_file
from kls.instances import InstanceSet, InstanceSpec, find_config, load_instances
from kls.lsp import features
from kls.lsp.convert import from_lsp_position, to_diagnostic
from kls.render import RenderResult, render
from kls.template.model import parse_template

log = logging.getLogger(__name__)
DEBOUNCE_S = 0.03
PREVIEW_REQUEST = "kls/preview"


@dataclass
class DocState:
    version: int = 0
    task: asyncio.Task[None] | None = None
    result: CheckResult | None = None


@dataclass
class KlsServer:
    ls: LanguageServer
    docs: dict[str, DocState] = field(default_factory=dict)
    configs: dict[Path, InstanceSet] = field(default_factory=dict)
    active: dict[str, str] = field(default_factory=dict)  # template path -> instance name

    # -- state ------------------------------------------------------------------------------
    def path(self, uri: str) -> Path:
        return Path(to_fs_path(uri) or uri).resolve()

    def text(self, uri: str) -> str:
        if uri not in self.docs:
            raise JsonRpcInvalidParams(f"kls: {uri} is not open; send textDocument/didOpen first")
        return self.ls.workspace.get_text_document(uri).source

    def instances(self, path: Path) -> InstanceSet | None:
        config = find_config(path)
        if config is None:
            return None
        if config not in self.configs:
            self.configs[config] = load_instances(config)
        return self.configs[config]

    def instances_of(self, path: Path) -> list[InstanceSpec]:
        found = self.instances(path)
        return found.depends_on(path) if found else []

    def active_instance(self, path: Path) -> InstanceSpec | None:
        candidates = self.instances_of(path)
        wanted = self.active.get(str(path))
        for spec in candidates:
            if spec.name == wanted:
                return spec
        return candidates[0] if candidates else None

    def overrides(self) -> dict[Path, str]:
        return {self.path(uri): self.text(uri) for uri in self.docs}

    # -- checking ---------------------------------------------------------------------------
    def check_now(self, uri: str) -> CheckResult:
        path = self.path(uri)
        return check_file(path, self.text(uri), self.instances(path), ModelCache(self.overrides()))

    def schedule(self, uri: str, version: int) -> None:
        state = self.docs.setdefault(uri, DocState())
        state.version = version
        if state.task is not None:
            state.task.cancel()
        state.task = asyncio.get_running_loop().create_task(self._check_later(uri, version))

    async def _check_later(self, uri: str, version: int) -> None:
        await asyncio.sleep(DEBOUNCE_S)
        try:
            result = await asyncio.to_thread(self.check_now, uri)
        except Exception as exc:  # a bug in a check must not take the server down
            log.exception("check failed")
            self.ls.window_log_message(
                lsp.LogMessageParams(type=lsp.MessageType.Error, message=f"kls check failed: {exc}")
            )
            return
        state = self.docs.get(uri)
        if state is None or state.version != version:
            return  # superseded: a newer check will publish
        state.result = result
        self.ls.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(
                uri=uri, version=version, diagnostics=[to_diagnostic(f) for f in result.findings]
            )
        )

    def refresh_lenses(self) -> None:
        workspace = self.ls.client_capabilities.workspace
        lens = workspace.code_lens if workspace else None
        if lens is not None and lens.refresh_support:
            self.ls.workspace_code_lens_refresh(None)

    def render_active(self, path: Path) -> RenderResult | None:
        spec = self.active_instance(path)
        if spec is None:
            return None
        return render(spec, self.overrides())


def create_server() -> LanguageServer:
    ls = LanguageServer("kls", __version__)
    k = KlsServer(ls)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: lsp.DidOpenTextDocumentParams) -> None:
        k.schedule(params.text_document.uri, params.text_document.version)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: lsp.DidChangeTextDocumentParams) -> None:
        k.schedule(params.text_document.uri, params.text_document.version)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: lsp.DidSaveTextDocumentParams) -> None:
        state = k.docs.get(params.text_document.uri)
        k.schedule(params.text_document.uri, state.version if state else 0)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: lsp.DidCloseTextDocumentParams) -> None:
        state = k.docs.pop(params.text_document.uri, None)
        if state and state.task:
            state.task.cancel()
        ls.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @ls.feature(
        lsp.TEXT_DOCUMENT_DIAGNOSTIC,
        lsp.DiagnosticOptions(
            identifier="kls", inter_file_dependencies=True, workspace_diagnostics=False
        ),
    )
    async def pull_diagnostics(
        params: lsp.DocumentDiagnosticParams,
    ) -> lsp.DocumentDiagnosticReport:
        result = await asyncio.to_thread(k.check_now, params.text_document.uri)
        return lsp.RelatedFullDocumentDiagnosticReport(
            items=[to_diagnostic(f) for f in result.findings]
        )

    @ls.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched(params: lsp.DidChangeWatchedFilesParams) -> None:
        k.configs.clear()  # kls.toml or a sub-template changed: re-read, re-check open docs
        for uri, state in list(k.docs.items()):
            k.schedule(uri, state.version)

    @ls.feature(lsp.TEXT_DOCUMENT_HOVER)
    async def hover(params: lsp.HoverParams) -> lsp.Hover | None:
        uri = params.text_document.uri
        path = k.path(uri)
        model = parse_template(k.text(uri))
        result = await asyncio.to_thread(k.render_active, path)
        return features.hover(model, from_lsp_position(params.position), result, path)

    @ls.feature(
        lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=[".", "(", ","])
    )
    def completion(params: lsp.CompletionParams) -> lsp.CompletionList:
        uri = params.text_document.uri
        text = k.text(uri)
        model = parse_template(text)
        lines = text.split("\n")
        line = lines[params.position.line] if params.position.line < len(lines) else ""
        items = features.completions(
            model, line, from_lsp_position(params.position), k.active_instance(k.path(uri))
        )
        return lsp.CompletionList(is_incomplete=False, items=items)

    @ls.feature(lsp.TEXT_DOCUMENT_DEFINITION)
    def definition(params: lsp.DefinitionParams) -> lsp.Location | None:
        uri = params.text_document.uri
        model = parse_template(k.text(uri))
        return features.definition(model, from_lsp_position(params.position), k.path(uri))

    @ls.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def symbols(params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
        if params.text_document.uri not in k.docs:
            return []
        return features.symbols(parse_template(k.text(params.text_document.uri)))

    @ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
        uri = params.text_document.uri
        spec = k.active_instance(k.path(uri))
        return features.code_lenses(parse_template(k.text(uri)), uri, spec.name if spec else None)

    async def preview(uri: str, instance: str | None = None) -> dict[str, Any]:
        path = k.path(uri)
        if instance:
            k.active[str(path)] = instance
        spec = k.active_instance(path)
        if spec is None:
            return {
                "instance": None,
                "text": None,
                "error": "no instance declares this template in kls.toml",
            }
        result = await asyncio.to_thread(render, spec, k.overrides())
        error = None if result.ok else "; ".join(f.message for f in result.findings)
        return {"instance": spec.name, "text": result.text, "error": error}

    @ls.feature(PREVIEW_REQUEST)
    async def preview_request(params: Any) -> dict[str, Any]:
        uri = _get(params, "uri")
        if not isinstance(uri, str):
            raise JsonRpcInvalidParams("kls/preview needs {uri: string, instance?: string}")
        return await preview(uri, _get(params, "instance"))

    @ls.command("kls.preview")
    async def preview_command(*args: Any) -> dict[str, Any]:
        uri, instance = _command_args(args, "kls.preview")
        return await preview(uri, instance)

    @ls.command("kls.selectInstance")
    def select_instance(*args: Any) -> dict[str, Any]:
        uri, name = _command_args(args, "kls.selectInstance")
        path = k.path(uri)
        names = [s.name for s in k.instances_of(path)]
        if name is not None:
            if name not in names:
                return {"ok": False, "instances": names, "error": f"no instance '{name}'"}
            k.active[str(path)] = name
            k.refresh_lenses()
        return {
            "ok": True,
            "active": k.active.get(str(path), names[0] if names else None),
            "instances": names,
        }

    @ls.command("kls.compile")
    def compile_command(*args: Any) -> dict[str, Any]:
        return {"ok": False, "error": "compile is not available in this version of kls yet"}

    @ls.command("kls.benchmark")
    def benchmark_command(*args: Any) -> dict[str, Any]:
        return {"ok": False, "error": "benchmark is not available in this version of kls yet"}

    return ls


def _command_args(args: tuple[Any, ...], command: str) -> tuple[str, str | None]:
    """Commands take [uri] or [uri, name]; anything else is the client's mistake."""
    if not args or not isinstance(args[0], str) or len(args) > 2:
        raise JsonRpcInvalidParams(f"{command} takes arguments [uri, instance?]")
    name = args[1] if len(args) == 2 else None
    if name is not None and not isinstance(name, str):
        raise JsonRpcInvalidParams(f"{command}: the instance name must be a string")
    return args[0], name


def _get(params: Any, key: str) -> Any:
    if isinstance(params, dict):
        return params.get(key)
    return getattr(params, key, None)


def serve(tcp: str | None = None) -> int:
    ls = create_server()
    if tcp:
        host, _, port = tcp.rpartition(":")
        ls.start_tcp(host or "127.0.0.1", int(port))
    else:
        ls.start_io()
    return 0
