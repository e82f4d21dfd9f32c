"""The render worker process: `python -m kls.sandbox.child MEMORY_MB`.

It reads requests from stdin and writes answers to its original stdout, both as
length-prefixed pickles (multiprocessing's Connection framing); anything else that writes to
stdout goes to stderr instead, so it cannot corrupt the stream.

A render request `("render", instance, overrides, limits)` is answered in three messages, so
that the parent's clock measures each step on its own:

1. `("ready",)` once the instance's CUTLASS op list is generated (kls's own work, before the
   template's deadline starts: it can take seconds at a high instantiation level);
2. `("render", result, spent)` when the template has rendered, within its deadline;
3. `("parse", outcome, spent)` when tree-sitter has parsed the rendered text (KT501), within
   its own deadline. A parse that runs out of memory can kill the worker (tree-sitter
   segfaults when malloc fails): the parent then has the render already and reports the
   parse as stopped.

A parse request `("parse", text)` (a render made elsewhere) gets message 3 alone.
"""

from __future__ import annotations

import gc
import os
import pickle
import resource
import signal
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kls.cuda_syntax import PARSE_SECONDS, ParseOutcome, parse_bounded
from kls.findings import Severity
from kls.instances.schema import InstanceSpec
from kls.render import LimitExceeded, Limits, RenderResult, prepare_op, render
from kls.runtime.record import RuntimeFinding, Site


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


def parse_rendered(result: RenderResult, seconds: float = PARSE_SECONDS) -> ParseOutcome:
    """tree-sitter's parse of the rendered CUDA (KT501), bounded by `seconds` (and by this
    process's memory limit and the parent's hard kill)."""
    if result.text is None:
        return ParseOutcome()
    instance = result.instance
    return parse_bounded(result.text, f"{instance.config_path}\0{instance.name}", seconds)


def portable(result: RenderResult, spent: bool) -> bytes:
    """The answer ("render", result, spent), pickled once, without what cannot or must not leave the
    worker (compiled templates hold their environment; a template may pass arbitrary Jinja
    objects to helpers)."""
    if result.kernel is not None:
        result.kernel.recorder.code_to_template = {}
    try:
        return pickle.dumps(("render", result, spent), pickle.HIGHEST_PROTOCOL)
    except Exception:
        for record in result.calls:
            record.args = tuple(_plain(a) for a in record.args)
            record.kwargs = {k: _plain(v) for k, v in record.kwargs.items()}
        return pickle.dumps(("render", result, spent), pickle.HIGHEST_PROTOCOL)


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
            request = requests.recv()
        except (EOFError, OSError):
            return
        try:
            if request[0] == "parse":
                outcome = parse_bounded(request[1], None, PARSE_SECONDS)
                spent = outcome.stopped is not None
                answers.send_bytes(pickle.dumps(("parse", outcome, spent)))
                if spent:
                    return
                continue
            _, instance, overrides, limits = request
            prepare_op(instance)  # trusted work: before the template's clock starts
            answers.send_bytes(pickle.dumps(("ready",)))
            result = render_bounded(instance, overrides, limits)
            spent = any(f.code == "KT104" for f in result.findings)
            answers.send_bytes(portable(result, spent))  # the parent's recv() unpickles it
            if spent:
                return
            if result.text is not None:
                outcome = parse_rendered(result)
                spent = outcome.stopped is not None  # its memory may stay taken: start afresh
                answers.send_bytes(pickle.dumps(("parse", outcome, spent)))
                if spent:
                    return
        except (OSError, MemoryError):
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
