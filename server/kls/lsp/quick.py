"""The quick tier in the editor: clang's check on save before nvcc's, and preambles built early.

On save, `kls.lsp.compile.compile_on_save` awaits `quick_on_save` (clang against the instance's
precompiled preamble, about a second) and then nvcc's check. The quick findings are stored
under the source `clang`; they replace the previous save's nvcc findings (those are about an
older text), and nvcc's verdict for this save replaces them in turn (`nvcc_verdict`), so a
clang-only complaint never outlives nvcc's check and an nvcc-only error still arrives.

When clang is missing or cannot handle a template, the client is told once (a warning
message per reason) and only nvcc runs. A template's preamble is built in the background
when it is first checked, so the first save already finds it warm.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

from lsprotocol import types as lsp

from kls.compile.quick import prepare_preamble, quick_check
from kls.compile.run import CompileCancelled, CompileResult
from kls.findings import Finding
from kls.instances import InstanceSpec
from kls.lsp.offload import off_loop, submit
from kls.lsp.state import KlsServer
from kls.template.source import python_file

# Notices already shown, per server: one message per reason, never a storm.
_SHOWN: weakref.WeakKeyDictionary[KlsServer, set[str]] = weakref.WeakKeyDictionary()
_WARMED: weakref.WeakKeyDictionary[KlsServer, set[tuple[str, str]]] = weakref.WeakKeyDictionary()
# The save each path's quick result belongs to: an older one arriving late is dropped.
_SAVES: weakref.WeakKeyDictionary[KlsServer, dict[Path, int]] = weakref.WeakKeyDictionary()
# The cancel of each path's running quick check: a newer save stops the older clang run.
_RUNNING: weakref.WeakKeyDictionary[KlsServer, dict[Path, threading.Event]] = (
    weakref.WeakKeyDictionary()
)


def instance_files(spec: InstanceSpec, findings: list[Finding]) -> set[str]:
    """Every file the instance reads (a template in a Python constant: that file) and any file
    a finding names."""
    files = {
        str(python_file(p).resolve())
        for p in (spec.template, spec.argument_template, spec.epilogue_template)
        if p is not None
    }
    return files | {f.path for f in findings}


async def quick_on_save(ls: KlsServer, uri: str) -> None:
    """clang's findings for the active instance of `uri`, published before nvcc starts."""
    path = ls.path(uri)
    spec = ls.active_instance(path)
    if spec is None:
        return
    saves = _SAVES.setdefault(ls, {})
    save = saves.get(path, 0) + 1
    saves[path] = save
    options = ls.compile_options("check")
    overrides = ls.overrides()
    running = _RUNNING.setdefault(ls, {})
    older = running.get(path)
    if older is not None:
        older.set()  # superseded: stop its clang now
    cancel = running[path] = threading.Event()
    try:
        result = await off_loop(quick_check, spec, options, overrides, cancel, None, False)
    except CompileCancelled:
        return
    except Exception as exc:  # the quick tier must never cost the user nvcc's check
        ls.report_failure("quick check", exc)
        return
    finally:
        if running.get(path) is cancel:
            del running[path]
    if saves.get(path) != save:
        return  # a newer save is on its way
    if result.notice:
        notify_once(ls, result.notice)
        return
    publish_quick(ls, spec, result)


def publish_quick(ls: KlsServer, spec: InstanceSpec, result: CompileResult) -> None:
    """Show clang's findings in place of the older text's nvcc findings."""
    for file in instance_files(spec, result.findings):
        for uri in ls.uris_of(Path(file)):
            ls.diagnostics.set(uri, "clang", [f for f in result.findings if f.path == file])
            ls.diagnostics.clear(uri, "nvcc")
            ls.publish(uri)


def nvcc_verdict(ls: KlsServer, spec: InstanceSpec, findings: list[Finding]) -> None:
    """nvcc has checked this text: the quick findings give way (published with nvcc's)."""
    for file in instance_files(spec, findings):
        for uri in ls.uris_of(Path(file)):
            ls.diagnostics.clear(uri, "clang")


def notify_once(ls: KlsServer, notice: str) -> None:
    shown = _SHOWN.setdefault(ls, set())
    if notice in shown:
        return
    shown.add(notice)
    message = lsp.ShowMessageParams(type=lsp.MessageType.Warning, message=f"kls: {notice}")
    ls.window_show_message(message)


def warm_preamble(ls: KlsServer, uri: str, first: bool) -> None:
    """After a template's first check once tools may run: build its active instance's
    preamble in the background, once per document and instance (nothing happens when it is
    stored, or when clang is missing). The first check may come before the client's settings
    (lint only then); the re-check their arrival starts is the one that warms."""
    if not ls.tools_allowed() or not ls.settings.compile_on_save:
        return  # before the client's settings arrive, lint only
    spec = ls.active_instance(ls.path(uri))
    if spec is None:
        return
    # `first` is true after every edit (the first result for each text): warm once per
    # document and instance, not once per keystroke.
    warmed = _WARMED.setdefault(ls, set())
    if (uri, spec.name) in warmed:
        return
    warmed.add((uri, spec.name))
    options = ls.compile_options("check")
    overrides = ls.overrides()

    def start() -> None:
        try:
            prepare_preamble(spec, options, overrides)
        except Exception:  # a background warm-up: the save path reports what fails
            return

    submit(start)


def register(ls: KlsServer) -> None:
    ls.after_check.append(warm_preamble)
