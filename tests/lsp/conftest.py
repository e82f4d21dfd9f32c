"""In-process language-server tests: a `Harness` client per test, render workers warmed once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kls.sandbox.workers import shared_workers
from tests.lsp.harness import Harness


@pytest.fixture(scope="session", autouse=True)
def warm_render_workers() -> None:
    """Start the render worker pool once, so each test takes milliseconds, not a spawn."""
    shared_workers().warm()


@pytest.fixture
async def lsp_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """An initialized in-process client (LSP 3.18 capabilities unless parametrized)."""
    harness = Harness()
    await harness.initialize(getattr(request, "param", "lsp-3.18"))
    yield harness
    await harness.close()
