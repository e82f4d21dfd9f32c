"""The language server's state: one `LanguageServer` subclass that owns the open documents, the
loaded configs, the client's settings, the long jobs and the diagnostics store.

Feature modules (`kls.lsp.documents`, `.preview`, `.navigation`, `.lenses`, `.compile`,
`.bench`) register their handlers on it and talk to each other only through it: the store
(every diagnostic, by document and source) and two hook lists (`after_check`, `after_save`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from cattrs import Converter
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import lsp_method
from pygls.uris import to_fs_path

from kls import __version__
from kls.checks.run import CheckResult, template_size_problem
from kls.compile import CompileOptions
from kls.findings import Finding
from kls.instances import InstanceSet, InstanceSpec, find_config, load_instances
from kls.lsp.convert import to_diagnostic
from kls.lsp.jobs import Jobs
from kls.lsp.offload import off_loop
from kls.lsp.protocol import CompileMode, DiagnosticSource
from kls.lsp.protocol_guard import GuardedProtocol
from kls.lsp.settings import Settings
from kls.profiles.triton.client import allow_torch, use_torch_python
from kls.render import RenderResult
from kls.sandbox.workers import configure as configure_render_workers
from kls.sandbox.workers import render_isolated
from kls.template.model import TemplateModel, parse_template
from kls.upstream.locate import forget as forget_torch_source
from kls.upstream.locate import set_explicit

log = logging.getLogger(__name__)
NO_TORCH_BEFORE_SETTINGS = (
    "Triton templates are rendered by Inductor (torch) once the editor's settings arrive; "
    "until then only the static checks run"
)
NO_TORCH_UNTRUSTED = (
    "Triton templates: Inductor's render runs torch, which is off in an untrusted workspace "
    "(static checks only); trust the workspace to render them"
)
PREVIEW_SCHEME = "kls-preview"


class KlsProtocol(GuardedProtocol):
    """Adds what pygls 2.1 cannot advertise itself: `workspace.textDocumentContent`; the
    JSON-RPC hardening (an error reply for every malformed request) is GuardedProtocol's.

    Diagnostics are pushed (textDocument/publishDiagnostics) to every client. Pull
    (textDocument/diagnostic) is answered from the same store, but advertised only to a
    client that asks for it with `initializationOptions: {"pullDiagnostics": true}`: a client
    that sees `diagnosticProvider` pulls as well as taking pushes, into a second collection,
    and may show every finding twice (VS Code did)."""

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams) -> Any:
        result = yield from super().lsp_initialize(params)
        workspace = result.capabilities.workspace or lsp.WorkspaceOptions()
        workspace.text_document_content = lsp.TextDocumentContentOptions(schemes=[PREVIEW_SCHEME])
        result.capabilities.workspace = workspace
        if not wants_pull_diagnostics(params.initialization_options):
            result.capabilities.diagnostic_provider = None
        settings = settings_in_options(params.initialization_options)
        if settings is not None:
            cast("KlsServer", self._server).apply_settings(Settings.from_client(settings))
        return result


def wants_pull_diagnostics(options: Any) -> bool:
    return isinstance(options, dict) and options.get("pullDiagnostics") is True


def settings_in_options(options: Any) -> dict[str, Any] | None:
    """The "kls" settings a client sent in `initializationOptions: {"settings": {...}}`."""
    if isinstance(options, dict) and isinstance(options.get("settings"), dict):
        return options["settings"]  # type: ignore[no-any-return]
    return None


# How long a command that runs a tool (compile, benchmark, tune) or a save waits for the
# client's settings before it refuses (a command) or does nothing (a save); the preamble
# warm-up never waits (the first settings re-check every open document, which warms it).
SETTINGS_WAIT_S = 5.0
NO_SETTINGS = (
    "kls has not received the editor's settings yet (the workspace/configuration request "
    "failed or was not answered), so it runs no tool (nvcc, clang, a benchmark) and only "
    "lints; send the settings (workspace/didChangeConfiguration) to enable it"
)


class SettingsUnknown(RuntimeError):
    """A tool was about to run before the client's settings were read (a kls bug: every
    path to a tool checks `KlsServer.tools_allowed` first)."""


@dataclass
class DocState:
    """An open document: its version, the check that runs for it and the last result."""

    version: int = 0
    generation: int = 0  # bumped by every reason to re-check, edits or not
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    result: CheckResult | None = None
    result_generation: int = -1  # the generation `result` was computed for
    result_complete: bool = False  # `result` covers every instance, not the active one only
    # A torch-rendered (Triton) template publishes its static checks before the render: that
    # result and its generation, and the last render's own findings, shown until the next's.
    static_result: CheckResult | None = None
    static_generation: int = -1
    render_layer: list[Finding] = field(default_factory=list)

    @property
    def up_to_date(self) -> bool:
        return self.result is not None and self.result_generation == self.generation


class DiagnosticsStore:
    """Every diagnostic kls shows, by document URI and source. Publishing (push) and
    `textDocument/diagnostic` (pull) both read it, so they always agree."""

    SOURCES: tuple[DiagnosticSource, ...] = ("kls", "clang", "nvcc", "kls-bench", "kls-tune")

    def __init__(self) -> None:
        self._by_uri: dict[str, dict[DiagnosticSource, list[Finding]]] = {}

    def set(self, uri: str, source: DiagnosticSource, findings: list[Finding]) -> None:
        self._by_uri.setdefault(uri, {})[source] = list(findings)

    def get(self, uri: str, source: DiagnosticSource | None = None) -> list[Finding]:
        """The findings of one source, or of all in SOURCES order."""
        sources = self._by_uri.get(uri, {})
        if source is not None:
            return list(sources.get(source, []))
        return [f for s in self.SOURCES for f in sources.get(s, [])]

    def clear(self, uri: str, *sources: DiagnosticSource) -> None:
        """Forget `sources` of `uri` (all of them when none is named)."""
        if not sources:
            self._by_uri.pop(uri, None)
            return
        for source in sources:
            self._by_uri.get(uri, {}).pop(source, None)

    def diagnostics(self, uri: str) -> list[lsp.Diagnostic]:
        return [to_diagnostic(f) for f in self.get(uri)]


class _Readers(InstanceSet):
    """An InstanceSet whose `depends_on` is remembered by path: checks ask it several times
    per edit, and each answer resolves every instance's template paths on disk."""

    def __init__(self, loaded: InstanceSet) -> None:
        super().__init__(loaded.path, loaded.instances, loaded.findings)
        self._readers: dict[Path, list[InstanceSpec]] = {}

    def depends_on(self, path: Path) -> list[InstanceSpec]:
        found = self._readers.get(path)
        if found is None:
            found = self._readers[path] = super().depends_on(path)
        return list(found)


# Hooks: `after_check(server, uri, first)` runs when a check of `uri` stored its findings and
# before they are published (`first`: the first result for this text); `after_save(server,
# uri)` when a document was saved.
CheckHook = Callable[["KlsServer", str, bool], None]
SaveHook = Callable[["KlsServer", str], Awaitable[None]]


class KlsServer(LanguageServer):
    """kls's language server and everything it knows."""

    def __init__(self, converter_factory: Callable[[], Converter] | None = None) -> None:
        """`converter_factory`: lsprotocol's by default (in-process tests share one: a new
        converter generates its (un)structuring code again, ~0.1 s)."""
        extra: dict[str, Any] = {}
        if converter_factory is not None:
            extra["converter_factory"] = converter_factory
        super().__init__("kls", __version__, protocol_cls=KlsProtocol, **extra)
        self.docs: dict[str, DocState] = {}
        self.configs: dict[Path, InstanceSet] = {}
        self.settings = Settings()
        # Whether the client's settings were read (initializationOptions, a
        # workspace/configuration reply or didChangeConfiguration's): before that nothing
        # that runs a tool starts, whatever the defaults say (fail closed).
        self.settings_known = False
        allow_torch(False, NO_TORCH_BEFORE_SETTINGS)
        self._settings_arrived = asyncio.Event()
        self.active: dict[str, str] = {}  # template path -> instance name the user chose
        self.previews: set[str] = set()  # preview URIs a client has opened
        self.diagnostics = DiagnosticsStore()
        self.jobs = Jobs(self)
        self.after_check: list[CheckHook] = []
        self.after_save: list[SaveHook] = []
        self._models: dict[str, tuple[str, TemplateModel]] = {}  # uri -> (text, model)
        self._paths: dict[str, Path] = {}
        self._config_paths: dict[Path, Path | None] = {}  # template path -> its config
        # What renders found about config lines (KT005 ...): config -> instance -> findings.
        self.config_findings: dict[Path, dict[str, list[Finding]]] = {}

    # -- documents ---------------------------------------------------------------------------
    def path(self, uri: str) -> Path:
        path = self._paths.get(uri)
        if path is None:
            path = self._paths[uri] = Path(to_fs_path(uri) or uri).resolve()
        return path

    def text(self, uri: str) -> str:
        if uri not in self.docs:
            raise JsonRpcInvalidParams(f"kls: {uri} is not open; send textDocument/didOpen first")
        return self.workspace.get_text_document(uri).source

    def overrides(self) -> dict[Path, str]:
        """The editor's text of every open document (it wins over the file on disk)."""
        return {self.path(uri): self.text(uri) for uri in self.docs}

    def uris_of(self, path: Path) -> list[str]:
        """The open documents showing `path`, else its canonical URI."""
        resolved = path.resolve()
        return [u for u in self.docs if self.path(u) == resolved] or [resolved.as_uri()]

    def forget(self, uri: str) -> DocState | None:
        """A document was closed: drop what was kept for it."""
        self._models.pop(uri, None)
        self.diagnostics.clear(uri, "kls", "kls-bench", "kls-tune")
        return self.docs.pop(uri, None)

    async def model(self, uri: str) -> TemplateModel:
        """The parsed template of an open document, parsed off the loop once per text; text
        beyond kls's size bounds gives an empty model (its check reports KT105). Its config
        is loaded too, so features see the document's instances."""
        text = self.text(uri)
        await self.load_config(self.path(uri))
        cached = self._models.get(uri)
        if cached is not None and cached[0] is text:
            return cached[1]
        too_large = template_size_problem(self.path(uri), text) is not None
        model = await off_loop(parse_template, "" if too_large else text)
        self._models[uri] = (text, model)
        return model

    # -- configs and instances ---------------------------------------------------------------
    def config_path(self, path: Path) -> Path | None:
        """`path`'s config file, looked up on disk once per path (a walk up its folders,
        several times per check on the event loop otherwise) until `forget_configs`."""
        if path in self._config_paths:
            return self._config_paths[path]
        configured = self.settings.instances_file
        config = Path(configured).expanduser() if configured else find_config(path)
        found = config if config is not None and config.is_file() else None
        self._config_paths[path] = found
        return found

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
            loaded = await off_loop(
                load_instances,
                config,
                extra_roots=self.settings.extra_roots,
                trusted=self.settings.workspace_trusted,
            )
            if config in self.configs:  # another task read it meanwhile
                return self.configs[config]
            self.configs[config] = _Readers(loaded)
            self.publish_config(config)
        return self.configs[config]

    def publish_config(self, config: Path) -> None:
        """Problems in kls.toml belong to kls.toml: show them there, whether it is open or not:
        its own (KT0xx from loading) and what the last render of each instance found about
        its lines."""
        loaded = self.configs.get(config)
        if loaded is None:
            return
        rendered = self.config_findings.get(config, {})
        found = [*loaded.findings]
        for name in sorted(rendered.keys() & loaded.instances.keys()):
            found.extend(f for f in rendered[name] if f not in found)
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(
                uri=config.resolve().as_uri(), diagnostics=[to_diagnostic(f) for f in found]
            )
        )

    def forget_configs(self) -> None:
        """kls.toml, a sub-template or a setting that reads them changed: read them again."""
        self.configs.clear()
        self._paths.clear()
        self._config_paths.clear()

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

    async def active_render(self, uri: str) -> RenderResult | None:
        """The active instance's render for the current text: the last check's when it is up
        to date, else a fresh one (off the event loop)."""
        path = self.path(uri)
        await self.load_config(path)
        spec = self.active_instance(path)
        if spec is None:
            return None
        state = self.docs.get(uri)
        if state is not None and state.up_to_date and state.result is not None:
            checked = state.result.renders.get(spec.name)
            if checked is not None:
                return checked
        return await off_loop(render_isolated, spec, self.overrides())

    # -- settings ----------------------------------------------------------------------------
    async def pull_settings(self) -> bool:
        """Ask the client for its settings and apply them; False when it cannot answer
        (the settings stay as they were: before any arrived, lint only)."""
        workspace = self.client_capabilities.workspace
        if workspace is None or not workspace.configuration:
            return False
        try:
            values = await self.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="kls")])
            )
        except Exception as exc:
            log.warning("workspace/configuration failed: %s", exc)
            return False
        self.apply_settings(Settings.from_client(values[0] if values else None))
        return True

    def apply_settings(self, settings: Settings) -> bool:
        """Use the client's `settings` from now on; True when they are the first to arrive."""
        read_with = ("instances_file", "extra_roots", "torch_source", "workspace_trusted")
        if any(getattr(settings, k) != getattr(self.settings, k) for k in read_with):
            set_explicit(settings.torch_source)
            forget_torch_source()
            self.forget_configs()  # configs are read with these: read them again
        self.settings = settings
        configure_render_workers(settings.worker_limits())
        allow_torch(settings.workspace_trusted, NO_TORCH_UNTRUSTED)
        # An untrusted workspace's settings name no program to run.
        use_torch_python(settings.torch_python if settings.workspace_trusted else None)
        first = not self.settings_known
        self.settings_known = True
        self._settings_arrived.set()
        return first

    def tools_allowed(self) -> bool:
        """Whether anything that runs a tool (clang, nvcc, a benchmark, a tune) may start."""
        return self.settings_known

    async def wait_for_settings(self, timeout: float = SETTINGS_WAIT_S) -> bool:
        """For a command that runs a tool: the settings, when they arrive within `timeout`."""
        if self.settings_known:
            return True
        try:
            await asyncio.wait_for(self._settings_arrived.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def compile_options(self, mode: CompileMode) -> CompileOptions:
        """The options of a tool run; refused before the client's settings are known."""
        if not self.tools_allowed():
            raise SettingsUnknown(NO_SETTINGS)
        return CompileOptions(
            mode=mode,
            nvcc=self.settings.nvcc_path,
            arch=self.settings.arch,
            cutlass_include=self.settings.cutlass_include,
            clang=self.settings.clang_path,
        )

    # -- diagnostics -------------------------------------------------------------------------
    def publish(self, uri: str) -> None:
        """Publish everything the store holds for `uri` (kls, nvcc and kls-bench together:
        one source never wipes another)."""
        state = self.docs.get(uri)
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(
                uri=uri,
                version=state.version if state else None,
                diagnostics=self.diagnostics.diagnostics(uri),
            )
        )

    def checked(self, uri: str, result: CheckResult, first: bool) -> None:
        """A check of `uri` finished for its current text: store, run the hooks, publish."""
        self.diagnostics.set(uri, "kls", result.findings)
        for hook in self.after_check:
            hook(self, uri, first)
        self.publish(uri)
        config = self.config_path(self.path(uri))
        if config is not None and result.renders:
            known = self.config_findings.setdefault(config, {})
            fresh = {
                n: [f for f in result.config_findings if f.instance == n] for n in result.renders
            }
            if any(known.get(n, []) != found for n, found in fresh.items()):
                known.update(fresh)
                self.publish_config(config)

    # -- client capabilities -----------------------------------------------------------------
    def supports_content_refresh(self) -> bool:
        workspace = self.client_capabilities.workspace
        return workspace is not None and workspace.text_document_content is not None

    def refresh_lenses(self) -> None:
        workspace = self.client_capabilities.workspace
        lens = workspace.code_lens if workspace else None
        if lens is not None and lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    def report_failure(self, what: str, exc: BaseException) -> None:
        """A bug in a check must not take the server down: log it and tell the client."""
        log.error("%s failed", what, exc_info=exc)
        self.window_log_message(
            lsp.LogMessageParams(type=lsp.MessageType.Error, message=f"kls {what} failed: {exc}")
        )
