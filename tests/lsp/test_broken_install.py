"""A broken install is said to be one: without tree-sitter-cuda, KT501 is off with one message
and no render worker dies of it (on such a machine every render's worker crashed and the user
was told the template needed too much memory); a worker that cannot start is not blamed on the
template."""

from __future__ import annotations

from pathlib import Path

import pytest

import kls.checks.syntax as syntax
import kls.cuda_syntax as cuda_syntax
from kls.instances import load_instances
from kls.render import Limits, render
from kls.sandbox.child import parse_rendered

ROOT = Path(__file__).resolve().parents[2]


def _no_parser() -> None:
    raise ImportError("No module named 'tree_sitter'")


def test_missing_parser_is_one_message_and_no_kt501(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cuda_syntax, "_parser", _no_parser)
    monkeypatch.setattr(syntax, "_SAID", [])
    spec = next(iter(load_instances(ROOT / "templates" / "kls.toml").instances.values()))
    result = render(spec, None, Limits(seconds=30))
    assert result.text is not None
    # What the worker's parse answers on such an install: no exception, the server decides.
    result.syntax = parse_rendered(result)
    assert result.syntax.unavailable and not result.syntax.errors
    assert syntax.syntax_findings(result, {}) == []  # type: ignore[arg-type]
    assert syntax.syntax_findings(result, {}) == []  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err.count("KT501") == 1 and "tree-sitter-cuda cannot be loaded" in err


def test_a_worker_that_fails_to_start_is_not_blamed_on_the_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kls.sandbox.workers import RenderWorkers

    # A worker whose interpreter cannot import kls (a broken install) exits with code 1.
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    broken = tmp_path / "kls"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('broken install')\n")
    workers = RenderWorkers(keep=1)
    try:
        spec = next(iter(load_instances(ROOT / "templates" / "kls.toml").instances.values()))
        result = workers.render(spec)
    finally:
        workers.close()
    [finding] = result.findings
    assert "broken kls install" in finding.message and "MB" not in finding.message
