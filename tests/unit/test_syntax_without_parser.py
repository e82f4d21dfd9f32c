"""A broken tree-sitter install turns KT501 off with one message; no render worker dies of it
(on a machine without tree-sitter-cuda, every render's worker crashed and the user was told
the template needed too much memory)."""

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
    parse_rendered(result)  # in the worker: no exception, the server decides
    assert result.syntax_errors is None
    assert syntax.syntax_findings(result, {}) == []
    assert syntax.syntax_findings(result, {}) == []
    err = capsys.readouterr().err
    assert err.count("KT501") == 1 and "tree-sitter-cuda cannot be loaded" in err
