"""The compile cache and nvcc's processes under attack (issue 9).

The cache must say "ok" only for what still compiles: a changed header, another CUTLASS tree or
nvcc's environment miss; malformed entries are discarded, never trusted. Cancelling, Ctrl-C and
SIGTERM kill nvcc's whole process group and cache nothing.

Most tests use a stand-in "nvcc" (a shell script that records its pid, can start a sleeping
child, and writes the dependency file and output like nvcc): they test kls's cache and process
handling, not nvcc. Tests marked `nvcc` run the real one on tiny templates.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from kls.compile import CompileOptions, CompileResult, compile_instance
from kls.compile.cache import CompileCache
from kls.compile.run import CompileCancelled
from kls.instances import InstanceSpec, load_instances
from tests.e2e.helpers import initialize, open_doc

REAL_NVCC = shutil.which("nvcc")
skip_without_nvcc = pytest.mark.skipif(REAL_NVCC is None, reason="nvcc is not installed")

FAKE_NVCC = r"""#!/bin/sh
# A stand-in for nvcc: answers --version, logs "pid ppid", optionally starts a sleeping child
# and waits for it, then writes the dependency file and the output as nvcc would.
if [ "$1" = "--version" ]; then
  echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0
fi
if [ "$1" = "-dryrun" ]; then exit 0; fi
out=""; deps=""; src=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift ;;
    -MF) deps="$2"; shift ;;
    *.cu) src="$1" ;;
  esac
  shift
done
echo "nvcc $$ $PPID" >> "$FAKE_NVCC_LOG"
if [ -n "$FAKE_NVCC_SLEEP" ]; then
  sleep "$FAKE_NVCC_SLEEP" &
  echo "child $!" >> "$FAKE_NVCC_LOG"
  wait
fi
printf '%s : %s \\\n  %s\n' "$out" "$src" "$FAKE_NVCC_DEP" > "$deps"
echo built > "$out"
"""

TEMPLATE = """\
#include "inc.cuh"
extern "C" __global__ void kls_k(float* x) { x[0] = INC_VALUE; }
"""
CONFIG = """\
[instances.i]
template = "t.cu.jinja"
arch = "90a"
tensors.X = { shape = [4], dtype = "fp32" }
"""


class Project:
    """A tiny template with a header next to it, a fake CUTLASS tree and a fake nvcc."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "proj"
        self.dir.mkdir()
        (self.dir / "t.cu.jinja").write_text(TEMPLATE)
        (self.dir / "kls.toml").write_text(CONFIG)
        self.header = self.write_old(self.dir / "inc.cuh", "#define INC_VALUE 1\n")
        self.cutlass = self.fake_cutlass("cutlass-a", "#define KLS_CUTLASS_TREE 1\n")
        self.nvcc = root / "bin" / "nvcc"
        self.nvcc.parent.mkdir()
        self.nvcc.write_text(FAKE_NVCC)
        self.nvcc.chmod(0o755)
        self.log = root / "nvcc.log"
        self.cache = CompileCache(root / "cache")

    @staticmethod
    def write_old(path: Path, text: str) -> Path:
        """Write `text`, dated a minute ago (a compile does not trust files edited during it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        past = time.time() - 60
        os.utime(path, (past, past))
        return path

    def fake_cutlass(self, name: str, text: str) -> Path:
        root = self.root / name
        self.write_old(root / "include" / "cutlass" / "cutlass.h", text)
        return root

    def spec(self) -> InstanceSpec:
        return load_instances(self.dir / "kls.toml").instances["i"]

    def env(self, sleep: float | None = None) -> dict[str, str]:
        env = {"FAKE_NVCC_LOG": str(self.log), "FAKE_NVCC_DEP": str(self.header)}
        if sleep is not None:
            env["FAKE_NVCC_SLEEP"] = str(sleep)
        return env

    def pids(self) -> list[int]:
        """Every pid the fake nvcc logged: itself and its sleeping child."""
        if not self.log.is_file():
            return []
        return [int(line.split()[1]) for line in self.log.read_text().splitlines()]

    def nvcc_runs(self) -> int:
        return sum(1 for line in self.log.read_text().splitlines() if line.startswith("nvcc"))

    def compile(
        self,
        cancel: threading.Event | None = None,
        mode: str = "check",
        cutlass: Path | None = None,
    ) -> CompileResult:
        options = CompileOptions(
            mode=mode, nvcc=str(self.nvcc), cutlass_include=str(cutlass or self.cutlass)
        )
        return compile_instance(self.spec(), options, cancel=cancel, cache=self.cache)


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    p = Project(tmp_path)
    for name, value in p.env().items():
        monkeypatch.setenv(name, value)
    return p


def alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (nvcc starts one: cicc, ptxas and gcc join it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


# --- the key covers what the compile read ------------------------------------------------------


def test_cache_hit_then_changed_header_recompiles(proj: Project) -> None:
    first = proj.compile()
    assert first.ok and not first.cached, first.log
    assert proj.compile().cached
    proj.header.write_text("#define INC_VALUE 2\n")
    changed = proj.compile()
    assert changed.ok and not changed.cached
    assert proj.nvcc_runs() == 2


def test_touched_header_with_the_same_content_is_still_a_hit(proj: Project) -> None:
    assert not proj.compile().cached
    os.utime(proj.header)  # a new mtime, the same bytes: re-hashed, still valid
    assert proj.compile().cached
    assert proj.compile().cached  # the re-hash was saved: a stat suffices again
    assert proj.nvcc_runs() == 1


def test_another_cutlass_tree_is_checked_not_trusted(proj: Project) -> None:
    header = proj.cutlass / "include" / "cutlass" / "cutlass.h"
    os.environ["FAKE_NVCC_DEP"] = str(header)
    assert not proj.compile().cached
    same = proj.fake_cutlass("cutlass-same", header.read_text())
    assert proj.compile(cutlass=same).cached  # identical headers: a valid hit
    other = proj.fake_cutlass("cutlass-b", "#define KLS_CUTLASS_TREE 2\n")
    assert not proj.compile(cutlass=other).cached


def test_nvcc_environment_is_in_the_key(proj: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not proj.compile().cached
    for name in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN", "CPATH"):
        monkeypatch.setenv(name, "-DKLS_OTHER")
        assert not proj.compile().cached, name
        monkeypatch.delenv(name)
    assert proj.compile().cached


def test_a_compile_without_a_dependency_list_is_not_cached(proj: Project) -> None:
    os.environ["FAKE_NVCC_DEP"] = str(proj.root / "gone.cuh")  # vanished: cannot be checked
    assert proj.compile().ok
    assert not proj.compile().cached


@pytest.mark.nvcc
@skip_without_nvcc
@pytest.mark.parametrize("mode", ["check", "build"])
def test_real_nvcc_header_next_to_template_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    proj = Project(tmp_path)
    proj.write_old(proj.header, "#ifdef KLS_BROKEN\n#error broken\n#endif\n#define INC_VALUE 1\n")
    options = CompileOptions(mode=mode, nvcc=REAL_NVCC or "nvcc")

    def compile_() -> CompileResult:
        return compile_instance(proj.spec(), options, cache=proj.cache)

    ok = compile_()
    assert ok.ok and not ok.cached, ok.log
    assert "-MD" in ok.command and f"-I{proj.dir}" in ok.command
    assert compile_().cached
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DKLS_BROKEN")
    broken = compile_()
    assert not broken.ok and not broken.cached
    assert any("broken" in f.message for f in broken.findings)
    monkeypatch.delenv("NVCC_APPEND_FLAGS")
    assert compile_().cached
    proj.header.write_text("#define INC_VALUE undefined_name\n")
    failed = compile_()
    assert not failed.ok and not failed.cached
    assert any("undefined_name" in f.message for f in failed.findings)


# --- malformed entries are discarded -----------------------------------------------------------


def _entry(proj: Project) -> tuple[Path, dict[str, object]]:
    first = proj.compile(mode="build")
    assert first.ok and first.key
    folder = proj.cache.folder(first.key)
    return folder, json.loads((folder / "result.json").read_text())


def _recompiles_inside_the_cache(proj: Project, runs_before: int) -> None:
    result = proj.compile(mode="build")
    assert result.ok and not result.cached
    assert proj.nvcc_runs() == runs_before + 1
    assert result.artifact is not None
    assert result.artifact.resolve().is_relative_to(proj.cache.root.resolve())
    assert result.artifact.read_text() == "built\n"


@pytest.mark.parametrize(
    "field, value",
    [
        ("ok", "yes"),
        ("returncode", "0"),
        ("log", None),
        ("seconds", [1]),
        ("artifact", 7),
        ("artifact", "../" * 32 + "etc/passwd"),
        ("artifact", "/etc/passwd"),
        ("artifact", ".."),
        ("deps", "inc.cuh"),
        ("deps", [{"path": 1, "mtime_ns": 0, "size": 0, "sha256": "x"}]),
    ],
)
def test_entry_of_the_wrong_shape_is_recompiled(proj: Project, field: str, value: object) -> None:
    folder, data = _entry(proj)
    data[field] = value
    (folder / "result.json").write_text(json.dumps(data))
    _recompiles_inside_the_cache(proj, 1)


def test_entry_that_is_not_json_or_a_list_is_recompiled(proj: Project) -> None:
    folder, _ = _entry(proj)
    for text in ("[1, 2]", "{nope", ""):
        (folder / "result.json").write_text(text)
        _recompiles_inside_the_cache(proj, proj.nvcc_runs())


def test_directory_in_place_of_the_result_or_artifact_is_recompiled(proj: Project) -> None:
    folder, _ = _entry(proj)
    (folder / "kernel.so").unlink()
    (folder / "kernel.so").mkdir()
    _recompiles_inside_the_cache(proj, 1)
    (folder / "result.json").unlink()
    (folder / "result.json").mkdir()
    _recompiles_inside_the_cache(proj, 2)


def test_symlinks_in_the_cache_are_never_followed(proj: Project) -> None:
    folder, data = _entry(proj)
    secret = proj.root / "secret.so"
    secret.write_text("foreign file\n")
    (folder / "kernel.so").unlink()
    (folder / "kernel.so").symlink_to(secret)
    _recompiles_inside_the_cache(proj, 1)
    assert secret.read_text() == "foreign file\n"
    # a result.json that links to a well-formed entry elsewhere
    planted = proj.root / "planted.json"
    planted.write_text(json.dumps(data))
    (folder / "result.json").unlink()
    (folder / "result.json").symlink_to(planted)
    _recompiles_inside_the_cache(proj, 2)
    # the lock file and the source linked to a foreign file: neither is written through
    (folder / ".lock").unlink()
    (folder / ".lock").symlink_to(secret)
    (folder / "kernel.cu").unlink()
    (folder / "kernel.cu").symlink_to(secret)
    (folder / "result.json").unlink()
    _recompiles_inside_the_cache(proj, 3)
    assert secret.read_text() == "foreign file\n"


def test_entry_folder_linked_elsewhere_is_replaced(proj: Project) -> None:
    folder, _ = _entry(proj)
    elsewhere = proj.root / "elsewhere"
    shutil.copytree(folder, elsewhere)
    shutil.rmtree(folder)
    folder.symlink_to(elsewhere)
    _recompiles_inside_the_cache(proj, 1)
    assert not folder.is_symlink()
    assert (elsewhere / "kernel.so").read_text() == "built\n"


# --- cancellation ------------------------------------------------------------------------------


def test_cancel_while_waiting_for_the_lock_returns_at_once(proj: Project) -> None:
    first = proj.compile()
    assert first.key
    cancel = threading.Event()
    outcome: list[object] = []

    def second() -> None:
        try:
            outcome.append(proj.compile(cancel=cancel))
        except CompileCancelled:
            outcome.append("cancelled")

    with proj.cache.lock(first.key):  # another process's compile of the same key
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        cancel.set()
        thread.join(1.0)
        assert not thread.is_alive(), "the cancel did not end the wait for the lock"
    assert outcome == ["cancelled"]


def test_cancel_kills_the_group_and_caches_nothing(proj: Project) -> None:
    os.environ["FAKE_NVCC_SLEEP"] = "2"
    cancel = threading.Event()
    outcome: list[object] = []
    thread = threading.Thread(
        target=lambda: outcome.append(_cancelled(lambda: proj.compile(cancel=cancel)))
    )
    thread.start()
    assert wait_for(lambda: len(proj.pids()) == 2)
    cancel.set()
    thread.join(5)
    assert outcome == ["cancelled"]
    # Killed processes are reaped a moment later under load: they must be gone well before
    # the 2 s the fake nvcc would have run, which a leak would exceed.
    assert wait_for(lambda: not any(alive(pid) for pid in proj.pids()), timeout=1.5)
    time.sleep(2.2)  # past the moment the fake nvcc would have finished
    assert list(proj.cache.root.glob("*/*/result.json")) == []


def _cancelled(fn: Callable[[], CompileResult]) -> CompileResult | str:
    try:
        return fn()
    except CompileCancelled:
        return "cancelled"


# --- processes: Ctrl-C, SIGTERM, relative nvcc --------------------------------------------------


def _kls(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`kls` as a terminal starts it: Ctrl-C's SIGINT at its default, whatever this pytest
    inherited (a shell's background job `cmd &` ignores SIGINT, and so would kls)."""
    return subprocess.Popen(
        [sys.executable, "-m", "kls.cli", *args],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_on_kls_compile_kills_nvcc_and_its_child(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    env = {**proj.env(sleep=60), "KLS_CACHE_DIR": str(tmp_path / "kls-cache")}
    kls = _kls("compile", "t.cu.jinja", "-i", "i", "--nvcc", str(proj.nvcc), cwd=proj.dir, env=env)
    started = wait_for(lambda: len(proj.pids()) == 2)
    kls.send_signal(signal.SIGINT)
    _, err = kls.communicate(timeout=20)
    assert started, f"the fake nvcc never started: {err}"
    assert kls.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err, err
    assert wait_for(lambda: not any(alive(pid) for pid in proj.pids()), 5), proj.pids()
    assert list((tmp_path / "kls-cache").glob("compile/*/*/result.json")) == []


def test_relative_nvcc_path_is_run_from_anywhere(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    env = {**proj.env(), "KLS_CACHE_DIR": str(tmp_path / "kls-cache")}
    kls = _kls(
        "compile", "proj/t.cu.jinja", "-i", "i", "--nvcc", "./bin/nvcc", cwd=tmp_path, env=env
    )
    _, err = kls.communicate(timeout=60)
    assert "Traceback" not in err
    assert kls.returncode == 0, err


@pytest.mark.parametrize("kind", ["not-executable", "directory", "missing"])
def test_unusable_nvcc_is_a_clear_finding(tmp_path: Path, kind: str) -> None:
    proj = Project(tmp_path)
    bad = tmp_path / "tools" / "nvcc"
    bad.parent.mkdir()
    if kind == "not-executable":
        bad.write_text(FAKE_NVCC)
    elif kind == "directory":
        bad.mkdir()
    env = {**proj.env(), "KLS_CACHE_DIR": str(tmp_path / "kls-cache")}
    kls = _kls(
        "compile", "proj/t.cu.jinja", "-i", "i", "--nvcc", "./tools/nvcc", cwd=tmp_path, env=env
    )
    out, err = kls.communicate(timeout=60)
    assert "Traceback" not in err
    assert kls.returncode == 1
    assert "KT604" in out and "kls.nvccPath" in out


@pytest.mark.nvcc
@skip_without_nvcc
def test_ctrl_c_kills_the_real_nvcc_and_cicc(workspace: Path, tmp_path: Path) -> None:
    """The shipped SM90 instance takes seconds in nvcc's front end: interrupt it there."""
    env = {"KLS_CACHE_DIR": str(tmp_path / "kls-cache")}
    kls = _kls("compile", "cutlass3x_gemm.cu.jinja", "-i", "sm90_bf16_4096", cwd=workspace, env=env)
    nvcc = _session_leader_child(kls.pid, "nvcc")
    assert nvcc is not None, "nvcc never started"
    assert wait_for(lambda: len(session_members(nvcc)) > 1, 20), "nvcc started no child"
    kls.send_signal(signal.SIGINT)
    _, err = kls.communicate(timeout=20)
    assert kls.returncode == 130 and "Traceback" not in err, err
    assert wait_for(lambda: session_members(nvcc) == [], 5), session_members(nvcc)


def _session_leader_child(parent: int, name: str, timeout: float = 30.0) -> int | None:
    """The child `name` of `parent` that leads its own session: the compile, not the short
    `nvcc --version` and `nvcc -dryrun` that find the toolchain."""
    found: list[int] = []

    def look() -> bool:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rsplit(")", 1)[1].split()
            if comm == name and int(fields[1]) == parent and int(fields[3]) == int(entry.name):
                found.append(int(entry.name))
                return True
        return False

    return found[0] if wait_for(look, timeout) else None


# --- the language server -----------------------------------------------------------------------


def served(tmp_path: Path, nvcc_seconds: float) -> tuple[Project, ClientServerConfig]:
    """A fake nvcc that takes `nvcc_seconds`, first on PATH for a `kls serve` with its own
    cache (the fake CUTLASS tree comes from the kls.cutlassInclude setting)."""
    proj = Project(tmp_path)
    env = {
        **os.environ,
        **proj.env(sleep=nvcc_seconds),
        "PATH": f"{proj.nvcc.parent}{os.pathsep}{os.environ['PATH']}",
        "KLS_CACHE_DIR": str(tmp_path / "kls-cache"),
    }
    server = [sys.executable, "-m", "kls.cli", "serve"]
    return proj, ClientServerConfig(server_command=server, server_env=env)


async def _start_compile(
    proj: Project, config: ClientServerConfig
) -> tuple[LanguageClient, asyncio.Future[Any]]:
    client = await config.start()
    assert isinstance(client, LanguageClient)
    client.set_configuration({"cutlassInclude": str(proj.cutlass)}, section="kls")
    await initialize(client, client_capabilities("visual-studio-code"))
    uri = open_doc(client, proj.dir / "t.cu.jinja")
    for _ in range(400):  # the first diagnostics: kls.toml is loaded
        if uri in client.diagnostics:
            break
        await asyncio.sleep(0.05)
    future = client.protocol.send_request(
        lsp.WORKSPACE_EXECUTE_COMMAND,
        lsp.ExecuteCommandParams(command="kls.compile", arguments=[uri, "check"]),
        msg_id="compile-1",
    )
    for _ in range(400):
        if len(proj.pids()) == 2:
            return client, asyncio.wrap_future(future)
        await asyncio.sleep(0.05)
    raise AssertionError(f"the fake nvcc never started: {future.result() if future.done() else ''}")


async def test_cancel_request_kills_nvcc_and_caches_nothing(tmp_path: Path) -> None:
    proj, config = served(tmp_path, nvcc_seconds=3)
    client, reply = await _start_compile(proj, config)
    client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id="compile-1"))
    with pytest.raises(Exception, match="cancel"):
        await asyncio.wait_for(reply, 10)
    for _ in range(100):
        if not any(alive(pid) for pid in proj.pids()):
            break
        await asyncio.sleep(0.05)
    assert not any(alive(pid) for pid in proj.pids()), "nvcc ran on after $/cancelRequest"
    await asyncio.sleep(3.5)  # past the moment the fake nvcc would have finished
    assert list((tmp_path / "kls-cache").glob("compile/*/*/result.json")) == []
    await client.shutdown_session()


async def test_sigterm_on_kls_serve_kills_nvcc(tmp_path: Path) -> None:
    proj, config = served(tmp_path, nvcc_seconds=60)
    client, _ = await _start_compile(proj, config)
    server = client._server
    assert server is not None
    server.send_signal(signal.SIGTERM)
    await asyncio.wait_for(server.wait(), 10)
    for _ in range(100):
        if not any(alive(pid) for pid in proj.pids()):
            break
        await asyncio.sleep(0.05)
    assert not any(alive(pid) for pid in proj.pids()), "nvcc outlived kls serve"
    await client.stop()  # type: ignore[no-untyped-call]  # pygls leaves it untyped


async def test_exit_without_shutdown_during_a_compile_kills_nvcc(tmp_path: Path) -> None:
    """`exit` (no `shutdown`) while nvcc runs: the server ends at once with code 1, and nvcc
    with it (the exit handler kills the child process groups and the render workers)."""
    proj, config = served(tmp_path, nvcc_seconds=60)
    client, _ = await _start_compile(proj, config)
    server = client._server
    assert server is not None
    client.protocol.notify(lsp.EXIT, None)
    assert await asyncio.wait_for(server.wait(), 10) == 1
    for _ in range(100):
        if not any(alive(pid) for pid in proj.pids()):
            break
        await asyncio.sleep(0.05)
    assert not any(alive(pid) for pid in proj.pids()), "nvcc outlived kls serve"
    await client.stop()  # type: ignore[no-untyped-call]  # pygls leaves it untyped
