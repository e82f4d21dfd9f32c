"""VS Code for real: the packaged .vsix in code-server 4.139.1 (VS Code 1.139), in Debian's
Chromium, driven by Playwright. tests/e2e/vscode/install.sh installs the tools (CI runs it).

Without the tools the tests skip with the reason; with KLS_REQUIRE_VSCODE_E2E=1 (CI) they fail
instead, so CI cannot pass without them.

One code-server (trusted workspace) serves the module and one browser the session; the
untrusted-workspace test starts its own. code-server runs with HOME, user data, extensions and
the kls compile cache in a temporary folder, and `nvcc` on its PATH is a logging wrapper around
the real one, so a test can tell whether (and which) nvcc ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.conftest import ROOT, TEMPLATES

CACHE = Path(os.environ.get("KLS_CI_CACHE", Path.home() / ".cache" / "kls-ci"))
NODE_DIR = Path(os.environ.get("KLS_NODE24_DIR", CACHE / "node-v24.22.3"))
CODE_SERVER = Path(
    os.environ.get(
        "KLS_CODE_SERVER", CACHE / "code-server-4.139.1" / "node_modules" / ".bin" / "code-server"
    )
)
REQUIRED = os.environ.get("KLS_REQUIRE_VSCODE_E2E") == "1"
EXTENSION = ROOT / "vscode-extension"
SCREENSHOTS = os.environ.get("KLS_E2E_SCREENSHOTS")  # a folder (docs/images) or unset: tmp

# What the test workspace plants on top of templates/: two kls findings on one line (the
# issue-13 template: "2 errors", not 4), a C++ error that only nvcc finds, and a clean copy of
# softmax for the on-save test to plant a C++ error in (clang's quick check, then nvcc's).
PLANTED = "planted.cu.jinja"
CXX_ERROR = "cxx_error.cu.jinja"
ON_SAVE = "on_save.cu.jinja"
PLANTED_INSTANCES = """
[instances.planted_bf16]
template = "planted.cu.jinja"
vars = { BLOCK_SIZE = 256 }
tensors.X = { shape = [8192, 4096], dtype = "bf16" }
tensors.Y = { shape = [8192, 4096], dtype = "bf16" }

[instances.cxx_error_bf16]
template = "cxx_error.cu.jinja"
vars = { BLOCK_SIZE = 256 }
tensors.X = { shape = [8192, 4096], dtype = "bf16" }
tensors.Y = { shape = [8192, 4096], dtype = "bf16" }

[instances.on_save_bf16]
template = "on_save.cu.jinja"
vars = { BLOCK_SIZE = 256 }
tensors.X = { shape = [8192, 4096], dtype = "bf16" }
tensors.Y = { shape = [8192, 4096], dtype = "bf16" }
"""
GOOD_NULL_CHECK = "{{kernel.check_not_null(Y)}}"
BAD_NULL_CHECK = "{{kernel.check_not_null(Z)}}"
GOOD_SCALE = "const float scale = 1.0f / row_sum;"
BAD_SCALE = "const float scale = 1.0f / row_total;"

NVCC_WRAPPER = """#!/bin/sh
echo "$$ $*" >> {log}
exec {nvcc} "$@"
"""


def _missing() -> list[str]:
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("Playwright (pip install -e '.[e2e]')")
    if shutil.which("chromium") is None:
        missing.append("chromium (apt-get install chromium)")
    if not (NODE_DIR / "bin" / "node").is_file():
        missing.append(f"Node 24 at {NODE_DIR}")
    if not CODE_SERVER.exists():
        missing.append(f"code-server at {CODE_SERVER}")
    if shutil.which("npm") is None or not (EXTENSION / "node_modules").is_dir():
        missing.append("npm and vscode-extension/node_modules (npm ci) to package the .vsix")
    if shutil.which("nvcc") is None:
        missing.append("nvcc")
    return missing


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.fspath)).parents]
    if not ours:
        return
    missing = _missing()
    for item in ours:
        item.add_marker(pytest.mark.vscode)
        if missing and not REQUIRED:
            reason = "VS Code e2e tools missing (tests/e2e/vscode/install.sh): " + "; ".join(
                missing
            )
            item.add_marker(pytest.mark.skip(reason=reason))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def vsix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = _missing()
    if missing:
        pytest.fail("VS Code e2e tools missing: " + "; ".join(missing))
    out = tmp_path_factory.mktemp("vsix") / "kls.vsix"
    for command in (
        ["npm", "run", "-s", "build"],
        # README images link into the repository's docs/images: nothing to rewrite them for.
        [
            "npx",
            "vsce",
            "package",
            "--no-dependencies",
            "--no-rewrite-relative-links",
            "--out",
            str(out),
        ],
    ):
        done = subprocess.run(command, cwd=EXTENSION, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def make_workspace(root: Path) -> Path:
    """templates/ plus the planted mistakes and their instances."""
    work = root / "workspace"
    shutil.copytree(TEMPLATES, work)
    softmax = (work / "softmax.cu.jinja").read_text()
    assert GOOD_NULL_CHECK in softmax and GOOD_SCALE in softmax
    (work / PLANTED).write_text(softmax.replace(GOOD_NULL_CHECK, BAD_NULL_CHECK))
    (work / CXX_ERROR).write_text(softmax.replace(GOOD_SCALE, BAD_SCALE))
    (work / ON_SAVE).write_text(softmax)
    with (work / "kls.toml").open("a") as f:
        f.write(PLANTED_INSTANCES)
    return work


class CodeServer:
    """One code-server process group with its own HOME, user data, extensions and cache."""

    def __init__(self, root: Path, vsix: Path, folder: Path, trusted: bool) -> None:
        self.root = root
        self.folder = folder
        self.port = _free_port()
        self.user_data = root / "user-data"
        self.extensions = root / "extensions"
        self.nvcc_log = root / "nvcc.log"
        self.nvcc_log.write_text("")
        bin_dir = root / "bin"
        bin_dir.mkdir()
        real_nvcc = shutil.which("nvcc")
        assert real_nvcc is not None
        wrapper = bin_dir / "nvcc"
        wrapper.write_text(NVCC_WRAPPER.format(log=self.nvcc_log, nvcc=real_nvcc))
        wrapper.chmod(0o755)
        home = root / "home"
        home.mkdir()
        # VS Code's server takes the extension host's environment from a login shell, whose
        # /etc/profile resets PATH: the wrapper goes first there too.
        profile = f'export PATH="{bin_dir}:$PATH"\n'
        (home / ".profile").write_text(profile)
        (home / ".bashrc").write_text(profile)
        settings = {
            "workbench.startupEditor": "none",
            "workbench.colorTheme": "Default Dark Modern",
            "workbench.tips.enabled": False,
            "workbench.editor.enablePreview": False,
            "workbench.secondarySideBar.defaultVisibility": "hidden",
            "chat.disableAIFeatures": True,
            "extensions.ignoreRecommendations": True,
            "update.mode": "none",
            "telemetry.telemetryLevel": "off",
            "security.workspace.trust.startupPrompt": "never",
            "editor.minimap.enabled": False,
            "editor.autoClosingBrackets": "never",
            "editor.autoClosingQuotes": "never",
            "editor.autoSurround": "never",
            "editor.autoIndent": "none",
            "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
            "editor.suggestOnTriggerCharacters": False,
            "editor.parameterHints.enabled": False,
            "editor.hover.delay": 200,
            "files.autoSave": "off",
            # A loaded 2-core CI machine runs VS Code, Chromium and kls at once: renders get
            # the editor's longest deadline, so a slow one is not a KT104 in the counts.
            "kls.renderTimeout": 10,
            # Every message in the kls log: a failed test names the files kls published to.
            "kls.trace.server": "verbose",
        }
        if trusted:
            settings["kls.compileOnSave"] = False  # nvcc runs only when a test asks
        (self.user_data / "User").mkdir(parents=True)
        (self.user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=1))
        # kls.python.interpreterPath is machine-scoped: VS Code reads it from the remote
        # machine's settings (code-server's Machine/settings.json), not the browser user's.
        (self.user_data / "Machine").mkdir()
        machine = {"kls.python.interpreterPath": sys.executable}
        (self.user_data / "Machine" / "settings.json").write_text(json.dumps(machine, indent=1))
        self.env = {
            **os.environ,
            "HOME": str(root / "home"),
            "PATH": f"{NODE_DIR / 'bin'}:{bin_dir}:{os.environ.get('PATH', '')}",
            "KLS_CACHE_DIR": str(root / "kls-cache"),
        }
        base = ["--user-data-dir", str(self.user_data), "--extensions-dir", str(self.extensions)]
        done = subprocess.run(
            [str(CODE_SERVER), *base, "--install-extension", str(vsix)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        args = [
            str(CODE_SERVER),
            "--bind-addr",
            f"127.0.0.1:{self.port}",
            "--auth",
            "none",
            "--disable-telemetry",
            "--disable-update-check",
            *base,
        ]
        if trusted:
            args.append("--disable-workspace-trust")
        self.log = root / "code-server.log"
        self.process = subprocess.Popen(
            [*args, str(folder)],
            env=self.env,
            start_new_session=True,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            time.sleep(0.1)
        else:
            raise AssertionError("code-server did not listen:\n" + self.log.read_text())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?folder={self.folder}"

    def nvcc_runs(self) -> list[str]:
        return [line for line in self.nvcc_log.read_text().splitlines() if line.strip()]

    def _logs(self, name: str) -> str:
        paths = sorted(self.user_data.glob(f"logs/*/exthost*/**/{name}"))
        return "\n".join(p.read_text(errors="replace") for p in paths)

    def exthost_log(self) -> str:
        """The extension host's log and the kls channel's own lines (its LSP trace left out:
        `published` reads that)."""
        kls = "\n".join(untraced(self._logs("kls.log")))
        return f"{self._logs('remoteexthost.log')}\n{kls}"

    def published(self) -> dict[str, tuple[int, int]]:
        """(errors, warnings) of kls's last textDocument/publishDiagnostics per file name (the
        name relative to the workspace), read from the client's trace of the LSP traffic."""
        return last_published(self._logs("kls.log"), self.folder)

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):  # the agent and the extension host
            os.killpg(self.process.pid, signal.SIGKILL)  # (and kls serve) share the group


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=shutil.which("chromium"),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        yield chromium
        chromium.close()


class Workbench:
    """A VS Code window in the browser and what a user does in it."""

    def __init__(self, page: Any, server: CodeServer) -> None:
        self.page = page
        self.server = server
        page.goto(server.url)
        page.wait_for_selector(".monaco-workbench", timeout=60_000)
        page.wait_for_selector("#status\\.problems", timeout=60_000)

    # -- finding things ------------------------------------------------------------------
    def status_item(self, item_id: str) -> Any:
        return self.page.locator(f"[id='{item_id}']")

    def status_label(self, item_id: str) -> str:
        item = self.status_item(item_id)
        if item.count() == 0:
            return ""
        return str(item.first.get_attribute("aria-label") or "")

    def kls_status(self) -> str:
        return str(self.status_item("kls-dev.kls").first.inner_text()).strip()

    def wait_for(self, predicate: Any, what: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what} (last: {value!r})\n{self.debug()}")

    def debug(self) -> str:
        labels = self.page.locator(".statusbar-item").evaluate_all(
            "items => items.map(item => item.getAttribute('aria-label'))"
        )
        published = {k: v for k, v in self.server.published().items() if v != (0, 0)}
        notes = self.notifications()
        log = self.server.exthost_log()[-3000:]
        return (
            f"kls's last publish per file (errors, warnings): {published}\n"
            f"status bar: {labels}\nnotifications: {notes}\n"
            f"--- extension host log ---\n{log}"
        )

    def notifications(self) -> list[str]:
        """The toasts' texts at one moment (counting, then reading each, raced a toast that
        went away in between: a 30 s wait for an element no longer there)."""
        toasts = self.page.locator(".notification-toast .notification-list-item-message")
        return [str(t) for t in toasts.all_inner_texts()]

    def problems(self) -> list[str]:
        """The Problems panel's marker rows (their accessible text: message, source, code,
        line), the panel opened where it is not."""
        panel = self.page.locator(".markers-panel")
        if panel.count() == 0 or not panel.first.is_visible():
            self.command("View: Focus Problems")
        panel.first.wait_for(state="visible")
        # A file's header row ("2 problems in file t.cu.jinja of folder .") then one a marker,
        # read in one go (counting rows, then reading each, races a list that re-renders).
        rows: list[str] = self.page.locator(
            ".markers-panel .monaco-list-row[aria-label]"
        ).evaluate_all(
            "rows => rows.map(row => `${row.getAttribute('aria-label')} | ${row.innerText}`)"
        )
        return [row.replace("\n", " ") for row in rows]

    def problem_count(self) -> tuple[int, int]:
        """(errors, warnings) as the status bar shows them."""
        label = self.status_label("status.problems")
        errors = re.search(r"Errors: (\d+)", label)
        warnings = re.search(r"Warnings: (\d+)", label)
        return (int(errors.group(1)) if errors else 0, int(warnings.group(1)) if warnings else 0)

    # -- doing things ----------------------------------------------------------------------
    def quick_input(self, text: str, opener: str) -> None:
        self.page.keyboard.press(opener)
        box = self.page.locator(".quick-input-widget input")
        box.wait_for(state="visible")
        box.fill(text)
        self.page.locator(".quick-input-list .monaco-list-row").first.wait_for(state="visible")
        time.sleep(0.3)  # let the list settle on the best match
        self.page.keyboard.press("Enter")

    def command(self, title: str) -> None:
        self.page.keyboard.press("Escape")
        self.quick_input(">" + title, "F1")

    def open_file(self, name: str) -> None:
        self.page.keyboard.press("Escape")
        self.quick_input(name, "Control+p")
        tab = self.page.locator(f".tabs-container .tab[aria-label^='{name}']")
        tab.first.wait_for(state="visible", timeout=20_000)
        self.page.locator(".editor-instance .monaco-editor .view-lines").first.wait_for()

    def goto(self, line: int, column: int = 1) -> None:
        """Move the cursor to 1-based (line, column), as Ctrl+G does."""
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+p")
        box = self.page.locator(".quick-input-widget input")
        box.wait_for(state="visible")
        box.fill(f":{line}:{column}")  # Go to Line in the active editor, from anywhere
        time.sleep(0.2)
        self.page.keyboard.press("Enter")
        self.wait_for(
            lambda: f"Ln {line}, Col {column}" in self.status_label("status.editor.selection"),
            f"cursor at {line}:{column}",
            timeout=10,
        )

    def click_until(self, target: Any, done: Any, what: str, timeout: float = 60) -> Any:
        """Click `target` until `done()` is truthy. Monaco re-renders a code lens's anchors
        when it re-resolves the lenses of the visible range, and a click whose press and
        release straddle that re-render is lost; a user clicks again, and so does this."""
        deadline = time.monotonic() + timeout
        while True:
            target.click()
            try:
                return self.wait_for(done, what, timeout=min(15, deadline - time.monotonic()))
            except AssertionError:
                if time.monotonic() >= deadline - 1:
                    raise

    def stable_texts(self, read: Any, what: str, settle: float = 1.0) -> list[str]:
        """`read()` once it has returned the same non-empty texts for `settle` seconds."""
        last: list[str] = []
        since = time.monotonic()

        def settled() -> list[str] | None:
            nonlocal last, since
            now = read()
            if now != last:
                last, since = now, time.monotonic()
                return None
            return now if now and time.monotonic() - since >= settle else None

        return list(self.wait_for(settled, what))

    def replace_line_text(self, line: int, old: str, new: str, line_text: str) -> None:
        """Select `old` on 1-based `line` (whose text is `line_text`) and type `new`."""
        column = line_text.index(old) + 1
        self.goto(line, column)
        for _ in old:
            self.page.keyboard.press("Shift+ArrowRight")
        self.page.keyboard.type(new)

    def screenshot(self, folder: Path, name: str) -> Path:
        path = folder / name
        self.page.screenshot(path=str(path))
        return path


PUBLISH = "Received notification 'textDocument/publishDiagnostics'."


LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \[\w+\] ")
TRACE_DATA = ("Params:", "Result:", "Error data:")


def untraced(log: str) -> list[str]:
    """The lines of a LogOutputChannel's file without the client's LSP trace. A trace entry is
    a "[Trace - ...]" line, maybe a "Params:"/"Result:" line with its JSON on lines of their
    own; it ends at the next line of the log's own (timestamped) that is neither."""
    kept, tracing = [], False
    for line in log.splitlines():
        entry = LOG_LINE.match(line)
        if entry:
            message = line[entry.end() :]
            tracing = message.startswith("[Trace - ") or (
                tracing and message.startswith(TRACE_DATA)
            )
        if not tracing and line.strip():
            kept.append(line)
    return kept


def last_published(log: str, folder: Path) -> dict[str, tuple[int, int]]:
    """(errors, warnings) of the last publishDiagnostics per file in a verbose LSP trace
    ((0, 0) for a file kls published as clean)."""
    counts: dict[str, tuple[int, int]] = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if not line.endswith(PUBLISH) or i + 1 >= len(lines) or "Params: {" not in lines[i + 1]:
            continue
        body = ["{"]
        for more in lines[i + 2 :]:
            body.append(more)
            if more == "}":
                break
        try:
            params = json.loads("\n".join(body))
        except json.JSONDecodeError:
            continue  # a trace cut short by the test's end
        uri = str(params.get("uri", ""))
        name = unquote(uri.removeprefix(folder.as_uri() + "/"))
        severities = [d.get("severity", 1) for d in params.get("diagnostics", [])]
        counts[name] = (severities.count(1), severities.count(2))
    return counts


def open_workbench(browser: Any, server: CodeServer) -> Workbench:
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    page = context.new_page()
    page.set_default_timeout(30_000)
    return Workbench(page, server)


@pytest.fixture(scope="module")
def trusted_server(tmp_path_factory: pytest.TempPathFactory, vsix: Path) -> Iterator[CodeServer]:
    root = tmp_path_factory.mktemp("code-server")
    server = CodeServer(root, vsix, make_workspace(root), trusted=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def vscode(browser: Any, trusted_server: CodeServer) -> Iterator[Workbench]:
    workbench = open_workbench(browser, trusted_server)
    workbench.command("View: Close Primary Side Bar")  # files open by name; wider pictures
    yield workbench
    workbench.page.context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        workbench = item.funcargs.get("vscode") if hasattr(item, "funcargs") else None
        folder = item.funcargs.get("shots") if hasattr(item, "funcargs") else None
        if isinstance(workbench, Workbench):
            name = f"failure-{item.name}.png"
            target = Path(folder) if folder and not SCREENSHOTS else Path(tempfile.gettempdir())
            try:
                workbench.page.screenshot(path=str(target / name))
                report.sections.append(("screenshot", str(target / name)))
                report.sections.append(("workbench", workbench.debug()))
                report.sections.append(("problems", "\n".join(workbench.problems())))
            except Exception as error:  # the page may be gone; the failure says the rest
                report.sections.append(("screenshot", f"none: {error}"))
