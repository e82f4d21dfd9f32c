"""An edited text's tokens taken from the text before it (kls.template.retokenize) are exactly
Jinja's own: random edits of real templates (kls's shipped ones, and Inductor's flex_backwards
where the torch source is found) compared with a fresh `tokenize`, and typing inside a line of
Python is taken the fast way."""

from __future__ import annotations

import random
from pathlib import Path

import jinja2
import pytest

from kls.template import retokenize
from kls.template.model import make_environment, parse_template
from kls.template.retokenize import tokenize_edited
from kls.template.tokens import TokenizeResult, tokenize
from tests.conftest import ROOT
from tests.upstream import require_torch_source

ENV = make_environment()
PIECES = ["x", " ", "  ", "\n", "{", "}", "{{", "%", "#", "-", "(", "'", '"', "ab", "\t", "\r\n"]


def _same(a: TokenizeResult, b: TokenizeResult) -> None:
    assert a.tokens == b.tokens
    assert a.shape == b.shape
    assert (a.error is None) == (b.error is None)
    assert a.index.starts == b.index.starts and a.index.text == b.index.text


def _texts() -> list[str]:
    texts = [p.read_text() for p in sorted((ROOT / "templates").glob("*.jinja"))[:3]]
    try:
        source = require_torch_source()
    except pytest.skip.Exception:
        return texts
    flex = source.package / "_inductor/kernel/flex/templates/flex_backwards.py.jinja"
    return [*texts, flex.read_text()]


# kls's own: whitespace control on both sides, a comment, raw text and a line of Python.
SMALL = """{{def_kernel("X")}}
    a = {{- size("X", 0) -}} + 1
    {%- if B %}
    b = a  # {{ '{' }} x
    {% endif -%}
    {# note #}  c = 2
{% raw %}{{ not jinja }}{% endraw %}
    d = {{ c }}
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "env", [ENV, jinja2.Environment(trim_blocks=True, lstrip_blocks=True)], ids=["inductor", "trim"]
)
def test_every_one_character_edit_of_a_small_template(env: jinja2.Environment) -> None:
    for at in range(len(SMALL) + 1):
        for piece in ("x", " ", "\n", "{", "}", "%", "#", "-", ""):
            for cut in (0, 1):
                tokenize_edited(env, SMALL)
                edited = SMALL[:at] + piece + SMALL[at + cut :]
                _same(tokenize_edited(env, edited), tokenize(env, edited))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_random_edits_tokenize_as_jinja_does(seed: int) -> None:
    rng = random.Random(seed)
    for text in _texts():
        current = text
        tokenize_edited(ENV, current)
        for _ in range(40):
            at = rng.randrange(len(current))
            cut = rng.choice([0, 0, 1, 2, 5])
            current = current[:at] + rng.choice(PIECES) * rng.randint(0, 2) + current[at + cut :]
            _same(tokenize_edited(ENV, current), tokenize(ENV, current))


def test_typing_in_a_line_of_python_skips_the_lexer(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "server/kls/scaffold/triton/scale.py.jinja").read_text()
    line = "    scaled = x * SCALE"
    assert line in text
    tokenize_edited(ENV, text)
    fresh: list[str] = []
    monkeypatch.setattr(retokenize, "tokenize", lambda env, s: fresh.append(s) or tokenize(env, s))
    typed = text
    for ch in " + 1.0":
        typed = typed.replace(line, line + ch, 1)
        line += ch
        _same(tokenize_edited(ENV, typed), tokenize(ENV, typed))
    assert fresh == []  # every keystroke was patched, none lexed again
    opened = typed.replace(line, line + " {{", 1)  # a new tag: Jinja's lexer again
    _same(tokenize_edited(ENV, opened), tokenize(ENV, opened))
    assert fresh == [opened]
    model = parse_template(typed)
    assert model.syntax_error is None and model.source == typed


def test_common_ends() -> None:
    assert retokenize.common_prefix("abcdef", "abXdef") == 2
    assert retokenize.common_suffix("abcdef", "abXdef", 4) == 3
    assert retokenize.common_prefix("abc", "abc") == 3
    assert retokenize.common_suffix("abc", "xbc", 1) == 1
    assert Path(retokenize.__file__).name == "retokenize.py"
