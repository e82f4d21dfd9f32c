"""`kls serve`: the pygls 2 language server.

Checks run in a worker thread, never on the event loop. Edits are coalesced per document: an
edit starts a check at once if none is running; edits that arrive during a check make it run
again on the newest text when it ends. A result is published only if the document did not change
while it was computed, so an older result never replaces a newer one.
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
from pygls.protocol import lsp_method
from pygls.uris import to_fs_path

from kls import __version__
from kls.checks.run import CheckResult, ModelCache, check_file, template_size_problem
from kls.compile import CompileOptions
from kls.findings import Finding
from kls.instances import InstanceSet, InstanceSpec, find_config, load_instances
from kls.lsp import features
from kls.lsp.bench_jobs import bench_findings, bench_view, benchmark_active
from kls.lsp.compile_jobs import compile_active
from kls.lsp.convert import from_lsp_position, to_diagnostic
from kls.lsp.jobs import Jobs
from kls.lsp.offload import off_loop
from kls.lsp.preview import SCHEME, parse_preview_uri, preview_uri
from kls.lsp.protocol_guard import GuardedProtocol, run_stdio, run_tcp
from kls.lsp.settings import Settings
from kls.render import RenderResult
from kls.sandbox.workers import configure as configure_render_workers
from kls.sandbox.workers import render_isolated
from kls.template.model import TemplateModel, parse_template

log = logging.getLogger(__name__)
PREVIEW_REQUEST = "kls/preview"
IDLE_BEFORE_FULL_CHECK_S = 0.15


@dataclass
class DocState:
    version: int = 0
    generation: int = 0  # bumped by every reason to re-check, edits or not
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    result: CheckResult | None = None
    result_generation: int = -1  # the generation `result` was computed for


class KlsProtocol(GuardedProtocol):
    """Adds what pygls 2.1 cannot advertise itself: `workspace.textDocumentContent`; the
    JSON-RPC hardening (an error reply for every malformed request) is GuardedProtocol's."""

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams) -> Any:
        result = yield from super().lsp_initialize(params)
        workspace = result.capabilities.workspace or lsp.WorkspaceOptions()
        workspace.text_document_content = lsp.TextDocumentContentOptions(schemes=[SCHEME])
        result.capabilities.workspace = workspace
        return result


@dataclass
class KlsServer:
    ls: LanguageServer
    docs: dict[str, DocState] = field(default_factory=dict)
    configs: dict[Path, InstanceSet] = field(default_factory=dict)
    active: dict[str, str] = field(default_factory=dict)  # template path -> instance name
    settings: Settings = field(default_factory=Settings)
    previews: set[str] = field(default_factory=set)  # preview URIs a client has opened
    nvcc: dict[str, list[Finding]] = field(default_factory=dict)  # path -> nvcc findings
    jobs: Jobs | None = None
    models: dict[str, tuple[str, TemplateModel]] = field(default_factory=dict)  # uri -> parsed

    # -- state ------------------------------------------------------------------------------
    def path(self, uri: str) -> Path:
        return Path(to_fs_path(uri) or uri).resolve()

    def text(self, uri: str) -> str:
        if uri not in self.docs:
            raise JsonRpcInvalidParams(f"kls: {uri} is not open; send textDocument/didOpen first")
        return self.ls.workspace.get_text_document(uri).source

    def config_path(self, path: Path) -> Path | None:
        configured = self.settings.instances_file
        config = Path(configured).expanduser() if configured else find_config(path)
        return config if config is not None and config.is_file() else None

    def instances(self, path: Path) -> InstanceSet | None:
        """The instances of `path`'s config, once `load_config` has read it (off the loop)."""
        config = self.config_path(path)
        return self.configs.get(config) if config is not None else None

    async def load_config(self, path: Path) -> InstanceSet | None:
        """Read `path`'s config in a worker thread (a large one takes a second), once."""
        config = self.config_path(path)
        if config is None:
            return None
        if config not in self.configs:
            loaded = await off_loop(load_instances, config, extra_roots=self.settings.extra_roots)
            if config in self.configs:  # another task read it meanwhile
                return self.configs[config]
            self.configs[config] = loaded
            # Problems in kls.toml belong to kls.toml: show them there, whether it is open or not.
            self.ls.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(
                    uri=config.resolve().as_uri(),
                    diagnostics=[to_diagnostic(f) for f in loaded.findings],
                )
            )
        return self.configs[config]

    async def model(self, uri: str) -> TemplateModel:
        """The parsed template of an open document, parsed off the loop once per text; text
        beyond kls's size bounds gives an empty model (its check reports KT105). Its config
        is loaded too, so features see the document's instances."""
        text = self.text(uri)
        await self.load_config(self.path(uri))
        cached = self.models.get(uri)
        if cached is not None and cached[0] is text:
            return cached[1]
        too_large = template_size_problem(self.path(uri), text) is not None
        model = await off_loop(parse_template, "" if too_large else text)
        self.models[uri] = (text, model)
        return model

    def instances_of(self, path: Path) -> list[InstanceSpec]:
        found = self.instances(path)
        return found.depends_on(path) if found else []

    def active_instance(self, path: Path) -> InstanceSpec | None:
        candidates = self.instances_of(path)
        wanted = self.active.get(str(path), self.settings.active_instance)
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
        """Check now if no check of this document runs; else the running one re-checks the
        newest version when it ends. No timer delay, no stale publish, one check at a time."""
        state = self.docs.setdefault(uri, DocState())
        state.version = version
        state.generation += 1  # an edit, a save, a config or sub-template change
        state.changed.set()
        if state.task is None or state.task.done():
            state.task = asyncio.get_running_loop().create_task(self._check_loop(uri))

    async def _check_loop(self, uri: str) -> None:
        """Publish static checks + the active instance first (the interactive path), then,
        once edits pause for IDLE_BEFORE_FULL_CHECK_S, every instance; a newer edit at any
        point restarts from the first phase."""
        while (state := self.docs.get(uri)) is not None:
            generation = state.generation
            text, overrides, path = self.text(uri), self.overrides(), self.path(uri)
            instances = await self.load_config(path)
            active = self.active_instance(path)
            phases: list[set[str] | None] = [None]
            if active is not None and len(self.instances_of(path)) > 1:
                phases = [{active.name}, None]

            def superseded(generation: int = generation) -> bool:
                current = self.docs.get(uri)
                return current is None or current.generation != generation

            for only in phases:
                if only is None and len(phases) > 1 and not await self._quiet(uri, generation):
                    break  # edits keep coming: the interactive phase comes first again
                try:
                    result = await off_loop(
                        check_file, path, text, instances, ModelCache(overrides), only, superseded
                    )
                except Exception as exc:  # a bug in a check must not take the server down
                    log.exception("check failed")
                    self.ls.window_log_message(
                        lsp.LogMessageParams(
                            type=lsp.MessageType.Error, message=f"kls check failed: {exc}"
                        )
                    )
                    return
                state = self.docs.get(uri)
                if state is None:
                    return  # closed meanwhile
                if state.generation != generation:
                    break  # superseded while running: check the newest inputs instead
                state.result = result
                state.result_generation = generation
                self.publish(uri)
                if only is not None:
                    self.refresh_previews(path)
            else:
                return

    async def _quiet(self, uri: str, generation: int) -> bool:
        """Wait until no trigger arrived for IDLE_BEFORE_FULL_CHECK_S (True), or one did."""
        state = self.docs.get(uri)
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

    def publish(self, uri: str) -> None:
        """Publish the kls, nvcc and kls-bench diagnostics of a document together: one never
        wipes another."""
        state = self.docs.get(uri)
        kls = state.result.findings if state and state.result else []
        nvcc = self.nvcc.get(str(self.path(uri)), [])
        bench = bench_findings(self, uri)
        self.ls.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(
                uri=uri,
                version=state.version if state else None,
                diagnostics=[to_diagnostic(f) for f in [*kls, *nvcc, *bench]],
            )
        )

    def compile_options(self, mode: str) -> CompileOptions:
        return CompileOptions(
            mode=mode,
            nvcc=self.settings.nvcc_path,
            arch=self.settings.arch,
            cutlass_include=self.settings.cutlass_include,
        )

    def supports_content_refresh(self) -> bool:
        workspace = self.ls.client_capabilities.workspace
        return workspace is not None and workspace.text_document_content is not None

    def refresh_previews(self, changed: Path) -> None:
        """Ask the client to re-read open previews of instances that read `changed`."""
        if not self.supports_content_refresh():
            return
        for uri in list(self.previews):
            parsed = parse_preview_uri(uri)
            if parsed is None:
                continue
            template, _ = parsed
            names = {s.template.resolve() for s in self.instances_of(changed)}
            if template.resolve() == changed or template.resolve() in names:
                self.ls.workspace_text_document_content_refresh(
                    lsp.TextDocumentContentRefreshParams(uri=uri), None
                )

    async def pull_settings(self) -> None:
        workspace = self.ls.client_capabilities.workspace
        if workspace is None or not workspace.configuration:
            return
        try:
            values = await self.ls.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="kls")])
            )
        except Exception as exc:  # a client that fails here keeps the defaults
            log.warning("workspace/configuration failed: %s", exc)
            return
        settings = Settings.from_client(values[0] if values else None)
        if (settings.instances_file, settings.extra_roots) != (
            self.settings.instances_file,
            self.settings.extra_roots,
        ):
            self.configs.clear()  # configs are read with these: read them again
        self.settings = settings
        configure_render_workers(settings.worker_limits())

    def refresh_lenses(self) -> None:
        workspace = self.ls.client_capabilities.workspace
        lens = workspace.code_lens if workspace else None
        if lens is not None and lens.refresh_support:
            self.ls.workspace_code_lens_refresh(None)

    async def active_render(self, uri: str) -> RenderResult | None:
        """The active instance's render for the current text: the last check's when it is up
        to date, else a fresh one (off the event loop)."""
        path = self.path(uri)
        await self.load_config(path)
        spec = self.active_instance(path)
        if spec is None:
            return None
        state = self.docs.get(uri)
        if state and state.result and state.result_generation == state.generation:
            checked = state.result.renders.get(spec.name)
            if checked is not None:
                return checked
        return await off_loop(render_isolated, spec, self.overrides())


def create_server() -> LanguageServer:
    ls = LanguageServer("kls", __version__, protocol_cls=KlsProtocol)
    k = KlsServer(ls)
    k.jobs = Jobs(ls)

    async def preview(uri: str, instance: str | None = None, select: bool = True) -> dict[str, Any]:
        """The rendered CUDA of `instance` (or the active one); `select` makes it active."""
        path = k.path(uri)
        await k.load_config(path)
        if instance and select:
            k.active[str(path)] = instance
        spec = k.active_instance(path)
        if instance and not select:
            spec = next((s for s in k.instances_of(path) if s.name == instance), None)
        if spec is None:
            return {
                "instance": None,
                "text": None,
                "uri": None,
                "error": "no instance declares this template in kls.toml",
            }
        result = await off_loop(render_isolated, spec, k.overrides())
        error = None if result.ok else "; ".join(f.message for f in result.findings)
        return {
            "instance": spec.name,
            "text": result.text,
            "error": error,
            "uri": preview_uri(path, spec.name),
        }

    @ls.feature(lsp.INITIALIZED)
    async def initialized(params: lsp.InitializedParams) -> None:
        await k.pull_settings()

    @ls.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def configuration_changed(params: lsp.DidChangeConfigurationParams) -> None:
        await k.pull_settings()
        for uri, state in list(k.docs.items()):
            k.schedule(uri, state.version)

    @ls.feature(lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT)
    async def document_content(
        params: lsp.TextDocumentContentParams,
    ) -> lsp.TextDocumentContentResult:
        parsed = parse_preview_uri(params.uri)
        if parsed is None:
            raise JsonRpcInvalidParams(f"kls serves only {SCHEME}: documents")
        template, instance = parsed
        k.previews.add(params.uri)
        answer = await preview(template.as_uri(), instance, select=False)
        text = answer["text"] if answer["text"] is not None else f"// {answer['error']}\n"
        return lsp.TextDocumentContentResult(text=text)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: lsp.DidOpenTextDocumentParams) -> None:
        k.schedule(params.text_document.uri, params.text_document.version)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: lsp.DidChangeTextDocumentParams) -> None:
        k.schedule(params.text_document.uri, params.text_document.version)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(params: lsp.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = k.docs.get(uri)
        k.schedule(uri, state.version if state else 0)
        if k.settings.compile_on_save:
            await k.load_config(k.path(uri))
            await compile_active(k, uri, "check")

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: lsp.DidCloseTextDocumentParams) -> None:
        state = k.docs.pop(params.text_document.uri, None)
        k.models.pop(params.text_document.uri, None)
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
        uri = params.text_document.uri
        await k.load_config(k.path(uri))
        result = await off_loop(k.check_now, uri)
        nvcc = k.nvcc.get(str(k.path(uri)), [])
        return lsp.RelatedFullDocumentDiagnosticReport(
            items=[to_diagnostic(f) for f in [*result.findings, *nvcc]]
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
        model = await k.model(uri)
        result = await k.active_render(uri)
        return features.hover(model, from_lsp_position(params.position), result, path)

    @ls.feature(
        lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=[".", "(", ","])
    )
    async def completion(params: lsp.CompletionParams) -> lsp.CompletionList:
        uri = params.text_document.uri
        text = k.text(uri)
        model = await k.model(uri)
        lines = text.split("\n")
        line = lines[params.position.line] if params.position.line < len(lines) else ""
        items = features.completions(
            model, line, from_lsp_position(params.position), k.active_instance(k.path(uri))
        )
        return lsp.CompletionList(is_incomplete=False, items=items)

    @ls.feature(lsp.TEXT_DOCUMENT_DEFINITION)
    async def definition(params: lsp.DefinitionParams) -> lsp.Location | None:
        uri = params.text_document.uri
        model = await k.model(uri)
        path = k.path(uri)
        return features.definition(
            model, from_lsp_position(params.position), path, k.active_instance(path)
        )

    @ls.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    async def symbols(params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
        if params.text_document.uri not in k.docs:
            return []
        return features.symbols(await k.model(params.text_document.uri))

    @ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS, lsp.CodeLensOptions(resolve_provider=True))
    async def code_lens(params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
        uri = params.text_document.uri
        spec = k.active_instance(k.path(uri))
        return features.code_lenses(await k.model(uri), uri, spec.name if spec else None)

    @ls.feature(lsp.CODE_LENS_RESOLVE)
    def code_lens_resolve(lens: lsp.CodeLens) -> lsp.CodeLens:
        uri = lens.data.get("uri") if isinstance(lens.data, dict) else None
        view = bench_view(k, uri) if isinstance(uri, str) else None
        return features.resolve_benchmark_lens(lens, view)

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
    async def select_instance(*args: Any) -> dict[str, Any]:
        uri, name = _command_args(args, "kls.selectInstance")
        path = k.path(uri)
        await k.load_config(path)
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
    async def compile_command(*args: Any) -> dict[str, Any]:
        if not args or not isinstance(args[0], str) or len(args) > 2:
            raise JsonRpcInvalidParams("kls.compile takes arguments [uri, mode?]")
        mode = args[1] if len(args) == 2 else "check"
        if mode not in ("check", "build"):
            raise JsonRpcInvalidParams("kls.compile: mode is 'check' or 'build'")
        await k.load_config(k.path(args[0]))
        return await compile_active(k, args[0], mode)

    @ls.command("kls.cancel")
    def cancel_command(*args: Any) -> dict[str, Any]:
        """Stop the compile and benchmark jobs of a template (what a status-bar Cancel sends)."""
        if len(args) != 1 or not isinstance(args[0], str):
            raise JsonRpcInvalidParams("kls.cancel takes arguments [uri]")
        path = k.path(args[0])
        assert k.jobs is not None
        stopped = [kind for kind in ("compile", "bench") if k.jobs.cancel(f"{kind}:{path}")]
        return {"cancelled": stopped}

    @ls.command("kls.benchmark")
    async def benchmark_command(*args: Any) -> dict[str, Any]:
        if len(args) != 1 or not isinstance(args[0], str):
            raise JsonRpcInvalidParams("kls.benchmark takes arguments [uri]")
        await k.load_config(k.path(args[0]))
        return await benchmark_active(k, args[0])

    @ls.feature(lsp.TEXT_DOCUMENT_INLAY_HINT)
    async def inlay_hints(params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
        uri = params.text_document.uri
        if uri not in k.docs:
            return []
        view = bench_view(k, uri)
        model = await k.model(uri)
        return features.bench_inlay_hints(model, view)

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
    """Serve over stdio (or TCP) until `exit`; the exit code is 1 when `exit` came without
    `shutdown`, as the LSP spec asks."""
    ls = create_server()
    if tcp:
        host, _, port = tcp.rpartition(":")
        return run_tcp(ls, host or "127.0.0.1", int(port))
    return run_stdio(ls)
