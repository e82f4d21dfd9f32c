"""Client settings: what `workspace/configuration` may send and what kls makes of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from kls.lsp.settings import Settings
from kls.sandbox.workers import DEFAULT_MEMORY_MB, DEFAULT_SECONDS, shared_workers
from tests.lsp.harness import Harness


def test_defaults_and_wrong_types() -> None:
    assert Settings.from_client(None) == Settings()
    assert Settings.from_client([1]) == Settings()
    odd = Settings.from_client(
        {
            "instancesFile": 3,
            "activeInstance": "",
            "nvccPath": None,
            "compileOnSave": "yes",
            "extraRoots": ["a", "", 5],
            "renderTimeout": True,
            "renderMemoryMB": 10**9,
        }
    )
    assert odd == Settings(extra_roots=("a",))
    assert (odd.render_timeout_s, odd.render_memory_mb) == (DEFAULT_SECONDS, DEFAULT_MEMORY_MB)


def test_values_are_read() -> None:
    settings = Settings.from_client(
        {
            "instancesFile": "k.toml",
            "activeInstance": "a",
            "nvccPath": "/opt/nvcc",
            "arch": "80",
            "compileOnSave": False,
            "cutlassInclude": "/c",
            "extraRoots": ["/x"],
            "renderTimeout": 2.5,
            "renderMemoryMB": 512,
        }
    )
    assert settings == Settings("k.toml", "a", "/opt/nvcc", "80", False, "/c", ("/x",), 2.5, 512)
    assert settings.worker_limits().seconds == 2.5


async def test_a_settings_change_reaches_the_render_workers(lsp_harness: Harness) -> None:
    lsp_harness.configure(renderTimeout=3.0, renderMemoryMB=768)
    for _ in range(100):
        if lsp_harness.server.settings.render_timeout_s == 3.0:
            break
        await asyncio.sleep(0.005)
    limits = shared_workers().limits
    try:
        assert (limits.seconds, limits.memory_mb) == (3.0, 768)
    finally:
        lsp_harness.configure()
        await asyncio.sleep(0.02)
    assert shared_workers().limits.seconds == DEFAULT_SECONDS


async def test_changing_the_config_setting_reloads_configs(
    lsp_harness: Harness, workspace: Path
) -> None:
    path = workspace / "softmax.cu.jinja"
    uri = lsp_harness.open(path.as_uri(), path.read_text())
    await lsp_harness.wait_diagnostics(uri, 1)
    assert lsp_harness.server.configs
    other = workspace / "other.toml"
    other.write_text((workspace / "kls.toml").read_text())
    lsp_harness.configure(instancesFile=str(other))
    for _ in range(100):
        if other in lsp_harness.server.configs:
            break
        await asyncio.sleep(0.01)
    assert list(lsp_harness.server.configs) == [other]
    lsp_harness.configure(instancesFile=str(other), nvccPath="/opt/nvcc")  # configs stay
    await asyncio.sleep(0.02)
    assert list(lsp_harness.server.configs) == [other]


async def test_a_client_without_configuration_is_lint_only_until_it_sends_settings() -> None:
    harness = Harness()
    await harness.initialize(lsp.ClientCapabilities())  # no workspace/configuration
    assert harness.server.settings == Settings()
    assert not harness.server.tools_allowed()  # fail closed: the defaults run no tool
    harness.notify(
        lsp.WORKSPACE_DID_CHANGE_CONFIGURATION,
        lsp.DidChangeConfigurationParams(settings={"kls": {"compileOnSave": False}}),
    )
    for _ in range(100):
        if harness.server.tools_allowed():
            break
        await asyncio.sleep(0.005)
    assert harness.server.tools_allowed() and not harness.server.settings.compile_on_save
    await harness.close()


async def test_settings_in_initialization_options_are_read_at_once() -> None:
    harness = Harness()
    harness.settings = {"compileOnSave": True}  # the pull, later, must not be needed
    await harness.request(
        lsp.INITIALIZE,
        lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(),
            initialization_options={"settings": {"compileOnSave": False, "renderTimeout": 2}},
        ),
    )
    assert harness.server.tools_allowed()
    assert harness.server.settings.compile_on_save is False
    assert harness.server.settings.render_timeout_s == 2.0
    await harness.close()


def test_an_editor_cannot_lift_the_render_bounds() -> None:
    """Values from an editor may be a workspace's own: at most 10 s and 2048 MB (the issue's
    300 s and 16384 MB let a template run to 6 GB); outside, the default applies. Only the
    CLI flags go higher."""
    from kls.cli import _parser

    raised = Settings.from_client({"renderTimeout": 300, "renderMemoryMB": 16384})
    assert (raised.render_timeout_s, raised.render_memory_mb) == (
        DEFAULT_SECONDS,
        DEFAULT_MEMORY_MB,
    )
    just_above = Settings.from_client({"renderTimeout": 10.01, "renderMemoryMB": 2049})
    assert just_above.worker_limits() == Settings().worker_limits()
    ceiling = Settings.from_client({"renderTimeout": 10, "renderMemoryMB": 2048})
    assert (ceiling.render_timeout_s, ceiling.render_memory_mb) == (10.0, 2048)
    args = _parser().parse_args(
        ["check", "--render-timeout", "300", "--render-memory", "16384", "."]
    )
    assert (args.render_timeout, args.render_memory) == (300.0, 16384)


def _torch_project(root: Path) -> Path:
    """A project whose kls.toml points [torch] source at a checkout-shaped folder in it."""
    package = root / "pytorch" / "torch" / "_inductor" / "kernel"
    package.mkdir(parents=True)
    (package / "mm.py").write_text("T = 'int x;'\n")
    (root / "pytorch" / "version.txt").write_text("2.11.0\n")
    (root / "k.cu.jinja").write_text("int y;\n")
    config = root / "kls.toml"
    config.write_text(
        '[torch]\nsource = "pytorch"\n\n[instances.up]\nprofile = "torch-2.11"\n'
        'template = "torch:_inductor/kernel/mm.py::T"\ntensors.X = { shape = [4], dtype = "f32" }\n'
    )
    return config


async def _wait_config(harness: Harness, config: Path, want: bool) -> None:
    for _ in range(200):
        loaded = harness.server.configs.get(config)
        if loaded is not None and ("up" in loaded.instances) == want:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"config never had 'up' {'loaded' if want else 'skipped'}")


async def test_an_untrusted_workspace_ignores_the_configs_torch_source(
    lsp_harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kls.upstream.locate import forget

    monkeypatch.delenv("KLS_TORCH_SOURCE", raising=False)  # the key must decide
    forget()
    config = _torch_project(tmp_path)
    lsp_harness.configure(workspaceTrusted=False)
    await asyncio.sleep(0.05)
    lsp_harness.open((tmp_path / "k.cu.jinja").as_uri(), "int y;\n")
    await _wait_config(lsp_harness, config, want=False)
    # the editor's own setting (a person's choice) is read, and trust brings the key back
    lsp_harness.configure(workspaceTrusted=True)
    await _wait_config(lsp_harness, config, want=True)
    lsp_harness.configure(torchSource=str(tmp_path / "pytorch"), workspaceTrusted=False)
    await _wait_config(lsp_harness, config, want=True)
    lsp_harness.configure()


async def test_the_torch_python_setting_is_a_trusted_workspaces_only(lsp_harness: Harness) -> None:
    """kls.torchPython names the Python of the torch worker; an untrusted workspace's settings
    name no program to run."""
    import os
    import sys

    from kls.profiles.triton.client import torch_python

    async def settle(trusted: bool) -> None:
        for _ in range(200):
            settings = lsp_harness.server.settings
            if settings.torch_python == "/opt/py/bin/python3" and (
                settings.workspace_trusted is trusted
            ):
                return
            await asyncio.sleep(0.005)

    try:
        lsp_harness.configure(torchPython="/opt/py/bin/python3", workspaceTrusted=False)
        await settle(False)
        assert torch_python() != "/opt/py/bin/python3"
        lsp_harness.configure(torchPython="/opt/py/bin/python3", workspaceTrusted=True)
        await settle(True)
        assert torch_python() == "/opt/py/bin/python3"
    finally:
        lsp_harness.configure()
        await asyncio.sleep(0.02)
    assert torch_python() in (sys.executable, os.environ.get("KLS_TORCH_PYTHON"))
