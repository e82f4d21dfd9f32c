"""`kls serve`: the pygls 2 language server, assembled from its feature modules.

The state lives in `kls.lsp.state.KlsServer`; each feature module registers its handlers with
`register(server)`.
"""

from __future__ import annotations

from collections.abc import Callable

from cattrs import Converter

from kls.lsp import bench, compile, documents, lenses, navigation, preview
from kls.lsp.protocol_guard import run_stdio, run_tcp
from kls.lsp.state import KlsServer

FEATURES = (documents, preview, navigation, lenses, compile, bench)


def create_server(converter_factory: Callable[[], Converter] | None = None) -> KlsServer:
    server = KlsServer(converter_factory)
    for feature in FEATURES:
        feature.register(server)
    return server


def serve(tcp: str | None = None) -> int:
    """Serve over stdio (or TCP) until `exit`; the exit code is 1 when `exit` came without
    `shutdown`, as the LSP spec asks."""
    server = create_server()
    if tcp:
        host, _, port = tcp.rpartition(":")
        return run_tcp(server, host or "127.0.0.1", int(port))
    return run_stdio(server)
