"""The render worker's KT501 parse never costs a render: a parse failure or a slow parse is
an outcome that says so (the server never parses), deep nesting does not overflow the walk,
and a spare worker started before new limits is not kept with the old ones."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import kls.sandbox.workers as workers_module
from kls.cuda_syntax import ParseTimeout, error_nodes
from kls.instances import load_instances
from kls.render import Limits, render
from kls.sandbox.child import parse_rendered
from kls.sandbox.workers import RenderWorkers, WorkerLimits

ROOT = Path(__file__).resolve().parents[2]
# tree-sitter-cuda needs seconds for this (slower than linear); it renders in milliseconds.
SLOW = "int f() { return " + "(a)(b)-(c)*" * 6000 + "1; }\n"


def _rendered() -> object:
    spec = next(iter(load_instances(ROOT / "templates" / "kls.toml").instances.values()))
    result = render(spec, None, Limits(seconds=30))
    assert result.text is not None
    return result


def test_a_slow_parse_stops_at_its_deadline_and_says_so() -> None:
    start = time.monotonic()
    with pytest.raises(ParseTimeout):
        error_nodes(SLOW, deadline=time.monotonic() + 0.1)
    assert time.monotonic() - start < 1.5
    # The halted parse is not resumed by the next one (tree-sitter would, without a reset).
    assert error_nodes("int x = 1;\n") == []
    assert error_nodes("int x = ;\n") == [(0, "ERROR", False)]
    result = _rendered()
    result.text = SLOW  # type: ignore[attr-defined]
    start = time.monotonic()
    outcome = parse_rendered(result, 0.1)  # type: ignore[arg-type]
    assert time.monotonic() - start < 1.5
    assert outcome.stopped == "tree-sitter was stopped after 0.1 s" and not outcome.errors


def test_any_parser_failure_is_a_stopped_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    import kls.cuda_syntax as cuda_syntax

    def broken(*_: object, **__: object) -> list[object]:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(cuda_syntax, "error_nodes", broken)
    outcome = parse_rendered(_rendered())  # type: ignore[arg-type]
    assert outcome.stopped and "RecursionError" in outcome.stopped


def test_deeply_nested_errors_are_found_without_recursion() -> None:
    deep = "int f() { return " + "(" * 3000 + "1 +" + ")" * 3000 + "; }\n"
    nodes = error_nodes(deep)
    assert nodes and all(isinstance(row, int) for row, _, _ in nodes)
    fresh = error_nodes(deep, deadline=time.monotonic() + 30)
    assert fresh == nodes


def test_a_spare_started_before_new_limits_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = RenderWorkers(keep=2)
    real = workers_module._Worker

    class Racing(real):  # type: ignore[misc, valid-type]
        def __init__(self, memory_mb: int) -> None:
            super().__init__(memory_mb)
            pool.set_limits(WorkerLimits(memory_mb=300))  # the settings arrive meanwhile

    monkeypatch.setattr(workers_module, "_Worker", Racing)
    try:
        pool._starting = True
        pool._start_spare()
        monkeypatch.setattr(workers_module, "_Worker", real)
        assert all(w.memory_mb == 300 for w in pool._idle)
        assert not pool._idle
    finally:
        pool.close()


def test_each_thread_parses_with_its_own_parser() -> None:
    import threading

    import kls.cuda_syntax as cuda_syntax

    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(cuda_syntax._parser()))
    thread.start()
    thread.join()
    assert seen[0] is not cuda_syntax._parser()
    assert cuda_syntax._parser() is cuda_syntax._parser()
