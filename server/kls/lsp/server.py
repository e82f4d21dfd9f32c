"""`kls serve`: the pygls 2 language server, assembled from its feature modules.

The state lives in `kls.lsp.state.KlsServer`; each feature module registers its handlers with
`register(server)`. This module imports them only when a server is made: `serve` first starts a
render worker, which then starts up on another core while pygls and the features import.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cattrs import Converter

    from kls.lsp.state import KlsServer


def create_server(converter_factory: Callable[[], Converter] | None = None) -> KlsServer:
    from kls.lsp import assembly, bench, compile, documents, lenses, navigation, preview, tune
    from kls.lsp.state import KlsServer

    server = KlsServer(converter_factory)
    for feature in (documents, preview, navigation, lenses, compile, bench, tune, assembly):
        feature.register(server)
    return server


def _warm_render_workers() -> None:
    from kls.sandbox.workers import shared_workers

    try:
        shared_workers().warm()
    except Exception:  # the first check starts one instead
        return


def serve(tcp: str | None = None) -> int:
    """Serve over stdio (or TCP) until `exit`; the exit code is 1 when `exit` came without
    `shutdown`, as the LSP spec asks."""
    threading.Thread(target=_warm_render_workers, name="kls-warm", daemon=True).start()
    # What is imported now lives as long as the server: no collections while pygls and the
    # features import (~30 ms of the start), and none that walk it later (a full one walked
    # all of it, 20-100 ms on the event loop, several times a minute while typing).
    gc.disable()
    try:
        server = create_server()
        from kls.lsp.protocol_guard import run_stdio, run_tcp
    finally:
        gc.freeze()
        gc.enable()

    if tcp:
        host, _, port = tcp.rpartition(":")
        return run_tcp(server, host or "127.0.0.1", int(port))
    return run_stdio(server)
