"""The render worker process: `python -m kls.sandbox.child MEMORY_MB`.

It reads (instance, overrides, limits) requests from stdin and writes (result, spent) answers to
its original stdout, both as length-prefixed pickles (multiprocessing's Connection framing);
anything else that writes to stdout goes to stderr instead, so it cannot corrupt the stream.
"""

from __future__ import annotations

import gc
import os
import pickle
import resource
import signal
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kls.cuda_syntax import WORKER_PARSE_MAX_CHARS, error_nodes
from kls.findings import Severity
from kls.instances.schema import InstanceSpec
from kls.render import LimitExceeded, Limits, RenderResult, render
from kls.runtime.record import RuntimeFinding, Site

# The longest the worker parses a rendered text for KT501 (a clean parse of a CUTLASS
# instance takes ~1 ms; tree-sitter needs seconds for some pathological texts).
PARSE_SECONDS = 0.5


def time_message(limits: Limits) -> str:
    return f"rendering took longer than {limits.seconds:g} s and was stopped; is a loop unbounded?"


def failed(instance: InstanceSpec, message: str) -> RenderResult:
    """A render that a limit stopped, as a KT104 finding at the top of the template."""
    finding = RuntimeFinding("KT104", Severity.ERROR, message, Site(str(instance.template), 0))
    return RenderResult(instance, None, None, [], [finding])


def _on_alarm(signum: int, frame: Any) -> None:
    raise LimitExceeded("time")


def apply_limits(memory_mb: int) -> None:
    """Address space, no core files, the deadline alarm; Ctrl-C belongs to the parent."""
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def render_bounded(
    instance: InstanceSpec, overrides: dict[Path, str], limits: Limits
) -> RenderResult:
    """Render with the alarm armed: it raises inside the template, so KT104 names its line."""
    signal.setitimer(signal.ITIMER_REAL, limits.seconds)
    try:
        return render(instance, overrides, limits)
    except LimitExceeded:  # the alarm fired outside render's own handlers
        return failed(instance, time_message(limits))
    except MemoryError:
        return failed(instance, "rendering ran out of memory")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def parse_rendered(result: RenderResult, seconds: float = PARSE_SECONDS) -> None:
    """tree-sitter's parse of the rendered CUDA (KT501), here while the server runs the
    template's own checks. A large text, a parse that takes more than `seconds` (tree-sitter
    is slower than linear on some texts) or any failure of the parser leaves it to the
    server, outside the render's deadline: the worker never dies of the parse, and a slow
    parse is not a slow render."""
    if result.text is None or len(result.text) > WORKER_PARSE_MAX_CHARS or seconds <= 0:
        return
    instance = result.instance
    try:
        result.syntax_errors = error_nodes(
            result.text, f"{instance.config_path}\0{instance.name}", time.monotonic() + seconds
        )
    except Exception:
        result.syntax_errors = None


def portable(result: RenderResult, spent: bool) -> bytes:
    """The answer (result, spent), pickled once, without what cannot or must not leave the
    worker (compiled templates hold their environment; a template may pass arbitrary Jinja
    objects to helpers)."""
    if result.kernel is not None:
        result.kernel.recorder.code_to_template = {}
    try:
        return pickle.dumps((result, spent), pickle.HIGHEST_PROTOCOL)
    except Exception:
        for record in result.calls:
            record.args = tuple(_plain(a) for a in record.args)
            record.kwargs = {k: _plain(v) for k, v in record.kwargs.items()}
        return pickle.dumps((result, spent), pickle.HIGHEST_PROTOCOL)


def _plain(value: Any) -> Any:
    try:
        pickle.dumps(value)
        return value
    except Exception:
        return f"<{type(value).__name__}>"


def serve(requests: Connection, answers: Connection, memory_mb: int) -> None:
    """One request at a time until the parent goes away; a worker that hit a limit exits."""
    apply_limits(memory_mb)
    gc.freeze()  # the imports: left out of garbage collections (kls.lsp.server does the same)
    frozen = False
    while True:
        try:
            instance, overrides, limits = requests.recv()
        except (EOFError, OSError):
            return
        started = time.monotonic()
        result = render_bounded(instance, overrides, limits)
        spent = any(f.code == "KT104" for f in result.findings)
        if not spent:  # the parse never takes the render past its deadline
            left = limits.seconds - (time.monotonic() - started)
            parse_rendered(result, min(PARSE_SECONDS, left))
        try:
            answers.send_bytes(portable(result, spent))  # the parent's recv() unpickles it
        except (OSError, MemoryError):
            return
        if spent:
            return
        if not frozen:  # what the first render built to stay (ops, compiled code) likewise
            frozen = True
            gc.collect()
            gc.freeze()


def main() -> None:
    answers = Connection(os.dup(1))
    os.dup2(2, 1)  # stray prints go to stderr, never into the answers
    sys.stdout = sys.stderr
    serve(Connection(0), answers, int(sys.argv[1]))


if __name__ == "__main__":
    main()
