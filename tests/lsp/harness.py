"""An LSP client inside the test process: JSON-RPC messages go straight into the server's
guarded dispatcher and its replies come back through a writer, with no process and no pipe.

What a real client answers (workspace/configuration, progress tokens, refresh requests) it
answers too, and it keeps every notification, so a test sees what an editor would see.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
from typing import Any

from cattrs import Converter
from lsprotocol import types as lsp
from pygls.protocol import default_converter

from kls.lsp.protocol_guard import dispatch
from kls.lsp.server import create_server
from kls.lsp.state import KlsServer
from tests.capabilities import capabilities as shared_capabilities

Json = dict[str, Any]


def capabilities(name: str) -> lsp.ClientCapabilities:
    """tests.capabilities's, structured by the harness's converter."""
    return shared_capabilities(name, _converter())


class LspError(Exception):
    def __init__(self, error: Json) -> None:
        super().__init__(error.get("message"))
        self.code = error.get("code")


_REGISTERED: set[tuple[Any, Any]] = set()


@functools.cache
def _converter() -> Converter:
    """One converter for every in-process server: cattrs generates its code once. A hook the
    guard registers again is skipped (registering clears cattrs's dispatch cache)."""
    converter = default_converter()

    class RegisterOnce(type(converter)):  # type: ignore[misc]
        __slots__ = ()

        def register_structure_hook(self, cl: Any, func: Any = None) -> Any:
            if (cl, func) in _REGISTERED:
                return None
            _REGISTERED.add((cl, func))
            return super().register_structure_hook(cl, func)

    converter.__class__ = RegisterOnce
    return converter


class Harness:
    def __init__(self, server: KlsServer | None = None) -> None:
        self.server = server or create_server(_converter)
        self.server.protocol.set_writer(self, include_headers=False)
        self.settings: Json = {}
        self.published: list[Json] = []  # every publishDiagnostics, in order
        self.notifications: list[Json] = []
        self.server_requests: list[Json] = []
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._published = asyncio.Event()
        self.init_result: Json = {}

    # -- the writer the server sends through ----------------------------------------------
    def write(self, data: bytes) -> None:
        message = json.loads(data)
        if "method" in message and "id" in message:
            self.server_requests.append(message)
            result = self._answer(message["method"], message.get("params"))
            asyncio.get_running_loop().call_soon(
                self._send, {"jsonrpc": "2.0", "id": message["id"], "result": result}
            )
        elif "method" in message:
            self.notifications.append(message)
            if message["method"] == lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS:
                self.published.append(message["params"])
                self._published.set()
        else:
            future = self._pending.pop(message["id"], None)
            if future is not None and not future.done():
                if "error" in message:
                    future.set_exception(LspError(message["error"]))
                else:
                    future.set_result(message.get("result"))

    def _answer(self, method: str, params: Any) -> Any:
        if method == lsp.WORKSPACE_CONFIGURATION:
            return [
                self.settings if item.get("section") == "kls" else None for item in params["items"]
            ]
        return None  # progress create, code lens / content refresh: acknowledged

    def _send(self, message: Json) -> None:
        dispatch(self.server.protocol, json.dumps(message).encode())  # type: ignore[arg-type]

    # -- what a client sends ------------------------------------------------------------
    def _json(self, params: Any) -> Any:
        return self.server.protocol._converter.unstructure(params)

    async def request(self, method: str, params: Any = None, timeout: float = 30) -> Any:
        msg_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        self._send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": self._json(params)})
        return await asyncio.wait_for(future, timeout)

    def notify(self, method: str, params: Any = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": self._json(params)})

    async def initialize(
        self, caps: str | lsp.ClientCapabilities = "lsp-3.18", options: Any = None
    ) -> Json:
        if isinstance(caps, str):
            caps = capabilities(caps)
        self.init_result = await self.request(
            lsp.INITIALIZE, lsp.InitializeParams(capabilities=caps, initialization_options=options)
        )
        self.notify(lsp.INITIALIZED, lsp.InitializedParams())
        for _ in range(20):  # the server asks for its settings: let that exchange finish
            await asyncio.sleep(0)
        return self.init_result

    async def command(self, command: str, *arguments: Any) -> Any:
        return await self.request(
            lsp.WORKSPACE_EXECUTE_COMMAND,
            lsp.ExecuteCommandParams(command=command, arguments=list(arguments)),
        )

    def open(self, uri: str, text: str, version: int = 1, language_id: str = "cuda-jinja") -> str:
        self.notify(
            lsp.TEXT_DOCUMENT_DID_OPEN,
            lsp.DidOpenTextDocumentParams(
                text_document=lsp.TextDocumentItem(
                    uri=uri, language_id=language_id, version=version, text=text
                )
            ),
        )
        return uri

    def change(self, uri: str, version: int, text: str) -> None:
        self.notify(
            lsp.TEXT_DOCUMENT_DID_CHANGE,
            lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
            ),
        )

    def configure(self, **settings: Any) -> None:
        """New client settings, announced the way VS Code does (the server pulls them)."""
        self.settings = settings
        self.notify(
            lsp.WORKSPACE_DID_CHANGE_CONFIGURATION, lsp.DidChangeConfigurationParams(settings=None)
        )

    # -- waiting ------------------------------------------------------------------------
    async def wait_diagnostics(
        self,
        uri: str,
        version: int | None = None,
        source: str | None = None,
        where: Any = None,
        since: int = 0,
        timeout: float = 20,
    ) -> list[Json]:
        """The diagnostics of the first publish for `uri` (at `version`, when given; from
        `published[since]` on) whose diagnostics (of `source`, when given) satisfy `where`
        (default: any)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = since
        while True:
            for params in self.published[seen:]:
                seen += 1
                if params["uri"] != uri or (
                    version is not None and params.get("version") != version
                ):
                    continue
                found = [d for d in params["diagnostics"] if source in (None, d.get("source"))]
                if where is None or where(found):
                    return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"no matching diagnostics for {uri} (version {version})")
            self._published.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._published.wait(), remaining)

    def latest(self, uri: str) -> list[Json]:
        for params in reversed(self.published):
            if params["uri"] == uri:
                return list(params["diagnostics"])
        return []

    async def close(self) -> None:
        for state in list(self.server.docs.values()):
            if state.task is not None:
                state.task.cancel()
        for key in list(self.server.jobs.running):
            self.server.jobs.cancel(key)
        await asyncio.sleep(0)
