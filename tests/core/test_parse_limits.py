"""tree-sitter's parse of rendered text is bounded like the render, and kls's own op list is
not (issue 31, first and fourth points).

tree-sitter-cuda is slower than linear on some texts and can take gigabytes doing it: a
200 KB `a<a<...` took 46 s and 16 GB in the `kls check` process, and a 57-byte template
rendering 15 MB of `({[<` stalled `kls serve` for 28 s at 3.35 GB. The parse now runs only in
render workers, under their memory limit and a deadline; past them it is one KT501 warning.

Each test runs kls in a process of its own under an address-space limit (RLIMIT_AS), so a
regression (a parse in the CLI or server process) fails the test, by a crash or a
MemoryError, instead of taking the machine's memory.
"""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from kls.cuda_syntax import PARSE_SECONDS
from kls.render import Limits
from kls.sandbox.workers import DEFAULT_SECONDS, GRACE_S, RenderWorkers
from tests.conftest import Workspace

# The CLI's and the server's own address space. A render worker lowers its own limit to the
# render memory (1024 MB); the parent needs far less than this: it never parses.
CLI_ADDRESS_SPACE = 2 * 1024**3
SERVER_ADDRESS_SPACE = 3 * 1024**3  # a server reserves more: its thread pool's stacks, arenas
# The inputs.
A_LESS_THAN = (
    'int f() {{}}\nint x = {{% for i in range({n}) %}}{{{{ "a<" * 50 }}}}{{% endfor %}};\n'
)
BRACKETS = '{% for i in range(93000) %}{{ "({[<" * 40 }}{% endfor %}\n'
STOPPED = "was not syntax-checked"


def _limit(address_space: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _workspace(root: Path, name: str, template: str) -> Path:
    path = root / name
    path.write_text(template)
    (root / "kls.toml").write_text(
        f'[defaults]\nkind = "cuda"\n[instances.one]\ntemplate = "{name}"\n'
    )
    return path


@pytest.mark.parametrize("n", [2000, 4000])
def test_kls_check_on_a_slow_parse_is_one_kt501_warning(tmp_path: Path, n: int) -> None:
    assert len(A_LESS_THAN.format(n=n)) < 80  # the template is tiny; its render is 100n bytes
    _workspace(tmp_path, "k.cu.jinja", A_LESS_THAN.format(n=n))
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "kls.cli", "check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: _limit(CLI_ADDRESS_SPACE),
    )
    elapsed = time.monotonic() - started
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)  # KT209: no crash
    stopped = [line for line in run.stdout.splitlines() if "KT501" in line]
    assert len(stopped) == 1 and STOPPED in stopped[0] and "warning" in stopped[0], run.stdout
    assert "MemoryError" not in run.stderr and "Traceback" not in run.stderr
    # The render (well under a second), the parse's deadline and grace, and the start.
    assert elapsed < DEFAULT_SECONDS + PARSE_SECONDS + GRACE_S + 5


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


async def test_a_slow_parse_in_the_server_never_delays_another_document(tmp_path: Path) -> None:
    bomb = _workspace(tmp_path, "bomb.cu.jinja", BRACKETS)
    assert len(BRACKETS.encode()) == 57
    good = tmp_path / "good.cu.jinja"
    good.write_text("{{ kernel.def_kernel(inputs=[X], outputs=[Y], names_str='X, Y') }}\n")
    with (tmp_path / "kls.toml").open("a") as config:
        config.write(
            '[instances.good]\ntemplate = "good.cu.jinja"\n'
            'tensors.X = { shape = [4], dtype = "f32" }\n'
            'tensors.Y = { shape = [4], dtype = "f32" }\n'
        )
    published: dict[str, list[lsp.Diagnostic]] = {}
    client = LanguageClient("parse-limit-test", "1")

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def record(params: lsp.PublishDiagnosticsParams) -> None:
        published[params.uri] = params.diagnostics

    await client.start_io(
        sys.executable,
        "-m",
        "kls.cli",
        "serve",
        preexec_fn=lambda: _limit(SERVER_ADDRESS_SPACE),
    )
    assert client._server is not None
    server = client._server
    try:
        await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
        client.initialized(lsp.InitializedParams())
        bomb_uri = _open(client, bomb)
        await asyncio.sleep(1.0)  # rendered (~0.5 s); tree-sitter is on it
        started = time.monotonic()
        good_uri = _open(client, good)
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
        assert time.monotonic() - started < 2.0
        while bomb_uri not in published:
            await asyncio.sleep(0.05)
            assert time.monotonic() - started < DEFAULT_SECONDS + PARSE_SECONDS + GRACE_S + 3
        stopped = [d for d in published[bomb_uri] if d.code == "KT501"]
        assert len(stopped) == 1 and STOPPED in stopped[0].message
        assert stopped[0].severity == lsp.DiagnosticSeverity.Warning
        assert server.returncode is None  # alive
        await client.shutdown_async(None)
        client.exit(None)
        exited = time.monotonic()
        while server.returncode is None and time.monotonic() - exited < 3:
            await asyncio.sleep(0.05)
        assert server.returncode == 0, server.returncode
    finally:
        if server.returncode is None:
            server.kill()
        await client.stop()


# -- the op list is kls's own work, outside the template's deadline (issue 31, fourth point) --
OP_TEMPLATE = "// {{ instance_type }}\n{{ instance_definition }}\n"


def test_a_slow_op_list_does_not_count_against_the_render_deadline(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold cache: the worker generates the SM90 op list (~1.2 s on 2 cores) before a
    render whose deadline is 0.3 s; the render still succeeds (it was KT104)."""
    cache = tmp_path / "cold-cache"
    monkeypatch.setenv("KLS_CACHE_DIR", str(cache))  # the worker inherits it
    instances = ws.instance(
        OP_TEMPLATE, 'kind = "cutlass_gemm"\narch = "90a"\nop_filter = { contains = ["_tnn_"] }\n'
    )
    pool = RenderWorkers(keep=1, max_workers=1)
    try:
        started = time.monotonic()
        result = pool.render(instances.instances["i"], limits=Limits(seconds=0.3))
        elapsed = time.monotonic() - started
    finally:
        pool.close()
    assert result.ok, [f.message for f in result.findings]
    assert "cutlass3x_sm90" in (result.text or "")
    # The op list really was generated in this render, and took well past the deadline (a
    # deadline that counted it would have stopped the render at 0.3 s).
    assert list(cache.rglob("names-sm90.json"))
    assert elapsed > 2 * 0.3
