"""Templates that loop forever or eat memory cost one KT104 finding, never the editor.

Renders run in killable worker processes (kls.sandbox.workers): a deadline inside the worker,
a kill from outside it, an address-space limit, and a pool that grows while workers are busy.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from kls.render import Limits
from kls.sandbox.workers import RenderWorkers, WorkerLimits
from tests.conftest import Workspace

LOOP_BOMB = "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}\n"
CONCAT_BOMB = "{% set a = 'x' * 10**9 %}{% set b = a ~ 'y' %}{% set c = b ~ 'z' %}\n"
APPEND_BOMB = (
    "// a memory bomb that grows 10 MB a step\n"
    "{% set l = [] %}{% for i in range(1000) %}"
    "{% set _ = l.append('x' * 10**7 ~ i) %}{% endfor %}\n"
)
GOOD = 'extern "C" int ok() { return 0; }\n'


@pytest.fixture
def pool() -> Iterator[RenderWorkers]:
    workers = RenderWorkers(keep=2, max_workers=4, limits=WorkerLimits(memory_mb=512))
    yield workers
    workers.close()


def test_loop_bomb_is_stopped_at_its_line_within_the_deadline(
    ws: Workspace, pool: RenderWorkers
) -> None:
    instances = ws.instance("// line 1\n" + LOOP_BOMB)
    started = time.monotonic()
    result = pool.render(instances.instances["i"], limits=Limits(seconds=1.0))
    elapsed = time.monotonic() - started
    assert [f.code for f in result.findings] == ["KT104"]
    assert "longer than 1 s" in result.findings[0].message
    site = result.findings[0].site
    assert site is not None and site.line == 1  # the loop's line, found by the worker's alarm
    assert elapsed < 1.0 + 1.0


def _status_kib(field: str) -> int:
    """A /proc/self/status figure in KiB (VmRSS: now; VmHWM: the peak since the last reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def test_the_issue_memory_bomb_never_allocates(ws: Workspace, pool: RenderWorkers) -> None:
    """The bomb's 1 GB string is never made in kls's own process: its peak resident memory,
    reset just before the render (earlier tests in this process may have raised it), grows
    by far less than that."""
    instances = ws.instance(CONCAT_BOMB)
    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset VmHWM to the current VmRSS
    before = _status_kib("VmRSS")
    result = pool.render(instances.instances["i"])
    assert [f.code for f in result.findings] == ["KT104"]
    assert _status_kib("VmHWM") - before < 256 * 1024  # KiB: under 256 MiB, not 1 GB


def test_memory_bomb_hits_the_address_space_limit(ws: Workspace, pool: RenderWorkers) -> None:
    instances = ws.instance(APPEND_BOMB)
    started = time.monotonic()
    result = pool.render(instances.instances["i"], limits=Limits(seconds=20))
    assert [f.code for f in result.findings] == ["KT104"]
    assert "memory" in result.findings[0].message
    assert time.monotonic() - started < 10
    # The spent worker is replaced and the next render works.
    good = ws.instance(GOOD)
    assert pool.render(good.instances["i"]).ok


def test_a_worker_that_ignores_its_deadline_is_killed(ws: Workspace) -> None:
    """The parent's own deadline (grace shortened so the worker's alarm cannot win)."""
    pool = RenderWorkers(keep=1, max_workers=2, limits=WorkerLimits(grace_s=-0.7))
    try:
        instances = ws.instance(LOOP_BOMB)
        result = pool.render(instances.instances["i"], limits=Limits(seconds=1.0))
        assert [f.code for f in result.findings] == ["KT104"]
        assert "was stopped" in result.findings[0].message
        assert pool.size == 0  # killed, not returned to the pool
        assert pool.render(ws.instance(GOOD).instances["i"]).ok
    finally:
        pool.close()


def test_a_worker_that_dies_is_reported_and_replaced(ws: Workspace, pool: RenderWorkers) -> None:
    instances = ws.instance(LOOP_BOMB)
    spec = instances.instances["i"]

    def kill_the_busy_worker() -> None:
        time.sleep(0.5)
        for worker in list(pool._busy):
            os.kill(worker.process.pid, 9)

    import threading

    killer = threading.Thread(target=kill_the_busy_worker)
    killer.start()
    result = pool.render(spec, limits=Limits(seconds=5.0))
    killer.join()
    assert [f.code for f in result.findings] == ["KT104"]
    assert "died (signal 9)" in result.findings[0].message
    assert pool.render(ws.instance(GOOD).instances["i"]).ok


def test_busy_workers_do_not_hold_up_other_renders(ws: Workspace) -> None:
    """Two bombs occupy two workers; a third render gets a new worker at once."""
    pool = RenderWorkers(keep=1, max_workers=4)
    try:
        bomb = ws.instance(LOOP_BOMB).instances["i"]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as executor:
            bombs = [executor.submit(pool.render, bomb, None, Limits(seconds=3)) for _ in "ab"]
            time.sleep(0.5)
            good_ws = Workspace(ws.root / "good")
            good_ws.root.mkdir()
            good = good_ws.instance(GOOD).instances["i"]
            started = time.monotonic()
            assert pool.render(good).ok
            assert time.monotonic() - started < 1.5
            assert all(f.result().findings[0].code == "KT104" for f in bombs)
    finally:
        pool.close()


def test_kls_check_ends_a_loop_bomb_with_kt104(ws: Workspace) -> None:
    ws.instance(LOOP_BOMB)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "check", str(ws.root), "--render-timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ws.root,
    )
    assert done.returncode == 1
    assert "KT104" in done.stdout and "longer than 1 s" in done.stdout
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 1 + 4  # the deadline, plus start-up


@pytest.mark.parametrize("flag", ["--render-timeout=0", "--render-memory=abc"])
def test_render_limit_flags_are_validated(ws: Workspace, flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kls.cli", "check", str(ws.root), flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "render-" in done.stderr and "Traceback" not in done.stderr


def test_render_limit_settings_from_the_client() -> None:
    from kls.lsp.settings import Settings

    chosen = Settings.from_client({"renderTimeout": 2.5, "renderMemoryMB": 2048})
    assert chosen.worker_limits() == WorkerLimits(memory_mb=2048, seconds=2.5)
    wild = Settings.from_client({"renderTimeout": 1e9, "renderMemoryMB": "lots"})
    assert wild.worker_limits() == WorkerLimits()


# -- in the language server -------------------------------------------------------------------
def _bomb_workspace(root: Path, bombs: int) -> tuple[list[Path], Path]:
    config = ['[defaults]\nkind = "cuda"\n']
    paths = []
    for i in range(bombs):
        path = root / f"bomb{i}.cu.jinja"
        path.write_text(LOOP_BOMB)
        paths.append(path)
        config.append(f'[instances.bomb{i}]\ntemplate = "{path.name}"\n')
    good = root / "good.cu.jinja"
    good.write_text("{{ kernel.def_kernel(inputs=[X], outputs=[Y], names_str='X, Y') }}\n")
    config.append(
        '[instances.good]\ntemplate = "good.cu.jinja"\n'
        'tensors.X = { shape = [4], dtype = "f32" }\ntensors.Y = { shape = [4], dtype = "f32" }\n'
    )
    (root / "kls.toml").write_text("\n".join(config))
    return paths, good


def _open(client: LanguageClient, path: Path) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=uri, language_id="cuda-jinja", version=1, text=path.read_text()
            )
        )
    )
    return uri


async def test_bombs_in_the_editor_never_delay_another_document(tmp_path: Path) -> None:
    bombs, good = _bomb_workspace(tmp_path, 6)
    published: dict[str, list[lsp.Diagnostic]] = {}
    client = LanguageClient("bomb-test", "1")

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def record(params: lsp.PublishDiagnosticsParams) -> None:
        published[params.uri] = params.diagnostics

    await client.start_io(sys.executable, "-m", "kls.cli", "serve")
    assert client._server is not None
    server = client._server
    try:
        await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
        client.initialized(lsp.InitializedParams())
        bomb_uris = [_open(client, p) for p in bombs]
        await asyncio.sleep(0.5)  # the bombs are running
        started = time.monotonic()
        good_uri = _open(client, good)
        while good_uri not in published:
            await asyncio.sleep(0.02)
            assert time.monotonic() - started < 2.0, "the good document's diagnostics waited"
        hover = await asyncio.wait_for(
            client.text_document_hover_async(
                lsp.HoverParams(
                    text_document=lsp.TextDocumentIdentifier(uri=good_uri),
                    position=lsp.Position(line=0, character=5),
                )
            ),
            2.0,
        )
        assert hover is not None
        while not all(u in published for u in bomb_uris):
            await asyncio.sleep(0.05)
            assert time.monotonic() - started < 5 + 3
        for uri in bomb_uris:
            assert [d.code for d in published[uri]] == ["KT104"]
        await client.shutdown_async(None)
        client.exit(None)
        exited = time.monotonic()
        while server.returncode is None and time.monotonic() - exited < 3:
            await asyncio.sleep(0.05)
        assert server.returncode is not None, "the server kept running after exit"
    finally:
        if server.returncode is None:
            server.kill()
        await client.stop()
