"""The quick tier in the editor, in process: a newer save stops the older save's clang run."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from kls.compile import CompileResult
from kls.compile.run import CompileCancelled
from kls.lsp import quick
from tests.lsp.harness import Harness


async def test_a_newer_save_cancels_the_older_quick_check(
    lsp_harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancels: list[threading.Event] = []

    def fake_quick_check(spec: Any, options: Any, overrides: Any, cancel: Any, *rest: Any) -> Any:
        cancels.append(cancel)
        if len(cancels) == 1 and cancel.wait(10):  # clang, stopped when cancelled
            raise CompileCancelled("cancelled")
        return CompileResult(spec.name, "quick", ok=True)

    monkeypatch.setattr(quick, "quick_check", fake_quick_check)
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    await lsp_harness.wait_diagnostics(uri, 1)
    server = lsp_harness.server
    first = asyncio.create_task(quick.quick_on_save(server, uri))
    while not cancels:
        await asyncio.sleep(0.01)
    await quick.quick_on_save(server, uri)  # saved again while the first still runs
    await asyncio.wait_for(first, 5)  # without a cancel, the first runs its whole 10 s
    assert cancels[0].is_set()
    assert not cancels[1].is_set()
    assert quick._RUNNING[server] == {}  # nothing left to cancel
