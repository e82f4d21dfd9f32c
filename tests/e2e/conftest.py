"""End-to-end tests: a real `kls serve` process over stdio. The one `client` fixture starts it
and initializes a pytest-lsp client with recorded VS Code capabilities; a test module picks
other clients with `pytest.mark.parametrize("client", CLIENTS, indirect=True)` and extra
server environment with `pytest.mark.server_env({...})`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.helpers import SERVER, initialize


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "server_env(env): extra environment for `kls serve`")


@pytest.fixture(params=["visual-studio-code"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[LanguageClient]:
    marker = request.node.get_closest_marker("server_env")
    config = SERVER
    if marker is not None:
        config = ClientServerConfig(
            server_command=SERVER.server_command, server_env={**os.environ, **marker.args[0]}
        )
    lsp_client = await config.start()
    try:
        await initialize(lsp_client, request.param)
        yield lsp_client
        await lsp_client.shutdown_session()
    finally:
        await lsp_client.stop()
