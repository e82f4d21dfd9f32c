"""The text kls renders is exactly plain Jinja's (issue 16), and its source map stays honest.

A fixed corpus of idioms that see the output while it is built (filters, `set` blocks, macros
with `caller()`, includes with whitespace control, `{% raw %}`, loops), then a property test
over templates generated from the same constructs: byte-identical output, and every rendered
line maps to a template line that can produce it.
"""

from __future__ import annotations

import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kls.instances import load_instances
from kls.render import RenderResult, render
from tests.conftest import TEMPLATES, Workspace, codes

VARS = {"NAME": "kern", "N": 7}
CONFIG = '[instances.i]\ntemplate = "t.cu.jinja"\nvars = { NAME = "kern", N = 7 }\n'


def render_both(root: Path, files: dict[str, str]) -> tuple[RenderResult, str | None]:
    """kls's render of `t.cu.jinja` (instance vars NAME, N) and plain Jinja's (None where
    plain Jinja raises), same files."""
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "kls.toml").write_text(CONFIG, encoding="utf-8")
    instances = load_instances(root / "kls.toml")
    assert not instances.findings, instances.findings
    result = render(instances.instances["i"])
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, loader=jinja2.FileSystemLoader(str(root))
    )
    try:
        return result, env.get_template("t.cu.jinja").render(**VARS)
    except Exception:  # e.g. `{% filter length %}` inside a buffer: Jinja joins an int
        return result, None


def mapped(result: RenderResult) -> list[tuple[str, str, int]]:
    assert result.text is not None and result.source_map is not None
    lines = result.text.split("\n")
    assert len(result.source_map.origins) == len(lines)
    out = []
    for i, line in enumerate(lines):
        origin = result.source_map.origin(i)
        assert origin is not None, (i, line)
        out.append((line, Path(origin.path).name, origin.line))
    return out


# --- fixed corpus ---------------------------------------------------------------------------

ISSUE_CASES: dict[str, tuple[dict[str, str], str]] = {
    "filter_trim": (
        {"t.cu.jinja": "{% filter trim %}  int a = {{ N }};   {% endfilter %}\n"},
        "int a = 7;",
    ),
    "set_block_length_and_indent": (
        {
            "t.cu.jinja": "{% set body %}int x = {{ N }};\nint y = {{ N * 2 }};{% endset %}\n"
            "// {{ body | length }}\n{{ body | indent(4) }}\n"
        },
        "\n// 22\nint x = 7;\n    int y = 14;",
    ),
    "macro_caller_trim": (
        {
            "t.cu.jinja": "{% macro m(a) %}{{ a }}_{{ caller() | trim }}{% endmacro %}"
            '{% call m("p") %}  q  {% endcall %}\n'
        },
        "p_q",
    ),
}

MORE_CASES: dict[str, dict[str, str]] = {
    "nested_includes_whitespace_control": {
        "t.cu.jinja": "top\n  {%- include 'a.cuh.jinja' -%}\n  after {{ NAME }}\n"
        "{% for i in range(2) %}\n{%- include 'a.cuh.jinja' %}{% endfor %}\nend\n",
        "a.cuh.jinja": "a1 {{ N }}\n{%- if true %}\n  a2\n"
        "  {%- include 'b.cuh.jinja' +%}\n{% endif %}",
        "b.cuh.jinja": "\n\n   b1 {{- ' b1x' }}\n{%- raw %} {{ b2 }}{% endraw -%}\n\n  b3\n",
    },
    "raw": {
        "t.cu.jinja": "x {% raw %}{{ not_a_name }}\n{% if %}{% endraw %} y\n{{ NAME }}\n",
    },
    "loops_with_loop_vars": {
        "t.cu.jinja": "{% for i in range(N) -%}\n"
        "  v{{ loop.index }}/{{ loop.length }}{% if loop.first %} first{% endif %}"
        "{% if not loop.last %},{% endif %} {{ loop.cycle('odd', 'even') }}\n"
        "{%- endfor %}\n"
        "{% for row in [[1, 2], [3]] recursive %}[{{ loop.depth }}{{ row }}]{% endfor %}\n",
    },
    "macros_in_loops_and_filters": {
        "t.cu.jinja": "{% macro decl(t, n) -%}\n  {{ t }} {{ n }};\n{%- endmacro %}\n"
        "{% filter upper %}\n{% for n in ['a', 'b'] %}{{ decl('int', n) }}\n{% endfor %}"
        "{% endfilter %}\n{{ decl('float', 'c') | replace(';', ' = 0;') | center(30) }}\n"
        "{{ 'one two three four five' | wordwrap(9) }}\n{{ '%s has %d' | format(NAME, N) }}\n",
    },
    "import_and_include_without_context": {
        "t.cu.jinja": "{% from 'm.cuh.jinja' import twice %}{{ twice('x') }}\n"
        "{% include 'plain.cuh.jinja' without context %}\nlast\n",
        "m.cuh.jinja": "ignored text\n{% macro twice(v) %}{{ v }}{{ v }}{% endmacro %}\n",
        "plain.cuh.jinja": "p1\np2\n",
    },
    "extends_and_blocks": {
        "t.cu.jinja": "{% extends 'base.cuh.jinja' %}{% block body %}B {{ N }}\n"
        "{{ super() }}{% endblock %}",
        "base.cuh.jinja": "head\n{% block body %}base body{% endblock %}\n"
        "{{ self.body() | length }}\n",
    },
}


@pytest.mark.parametrize("case", sorted(ISSUE_CASES))
def test_issue_cases_render_exactly_like_jinja(case: str, tmp_path: Path) -> None:
    files, expected = ISSUE_CASES[case]
    result, plain = render_both(tmp_path, files)
    assert plain == expected
    assert result.text == plain
    mapped(result)


@pytest.mark.parametrize("case", sorted(MORE_CASES))
def test_more_idioms_render_exactly_like_jinja(case: str, tmp_path: Path) -> None:
    result, plain = render_both(tmp_path, MORE_CASES[case])
    assert result.findings == []
    assert result.text == plain
    for _line, name, line in mapped(result):
        assert line < len((tmp_path / name).read_text().split("\n"))


def test_issue_cases_map_to_the_statement_that_emits_them(tmp_path: Path) -> None:
    files = {
        "t.cu.jinja": "// top\n"  # 0
        "{% filter trim %}\n  int a = {{ N }};\n{% endfilter %}\n"  # 1-3
        "{% set body %}int x = {{ N }};\nint y = {{ N * 2 }};{% endset %}\n"  # 4-5
        "// {{ body | length }}\n"  # 6
        "  {{ body | indent(4) }}\n"  # 7
        "{% macro m(a) %}{{ a }}_{{ caller() | trim }}{% endmacro %}\n"  # 8
        '{% call m("p") %}  q  {% endcall %}\n'  # 9
        "// end\n"  # 10
    }
    result, plain = render_both(tmp_path, files)
    assert result.text == plain
    where = {line: origin for line, _name, origin in mapped(result)}
    assert where["// top"] == 0
    assert where["int a = 7;"] == 1
    assert where["// 22"] == 6
    assert where["  int x = 7;"] == where["    int y = 14;"] == 7
    assert where["p_q"] == 9
    assert where["// end"] == 10


def test_nested_includes_map_into_their_files(tmp_path: Path) -> None:
    result, plain = render_both(tmp_path, MORE_CASES["nested_includes_whitespace_control"])
    assert result.text == plain
    pairs = mapped(result)
    assert ("topa1 7", "t.cu.jinja", 0) in pairs
    assert ("after kern", "t.cu.jinja", 2) in pairs
    assert ("a1 7", "a.cuh.jinja", 0) in pairs
    assert ("  a2", "a.cuh.jinja", 2) in pairs
    assert ("", "b.cuh.jinja", 1) in pairs
    assert ("   b1 b1x {{ b2 }}b3", "b.cuh.jinja", 2) in pairs
    assert ("end", "t.cu.jinja", 5) in pairs


def test_the_three_idioms_in_valid_cuda_get_no_kt501(ws: Workspace) -> None:
    template = (
        "{% macro guard(name) %}if ({{ name }} == nullptr) { {{ caller() | trim }} }"
        "{% endmacro %}\n"
        "{% set body %}\n  int x = {{ N }};\n  int y = {{ N * 2 }};\n{% endset %}\n"
        'extern "C" __global__ void {{ NAME }}(int* out) {\n'
        "{% filter indent(2, true) %}{{ body | trim }}{% endfilter %}\n"
        '  {% call guard("out") %}  return;  {% endcall %}\n'
        "  out[0] = x + y + {{ body | length }};\n"
        "  {% filter trim %}   int z = 0;   {% endfilter %}\n"
        "}\n"
    )
    result = ws.check(template, "vars = { NAME = 'kern', N = 7 }")
    assert "KT501" not in codes(result.findings), [f.format_line() for f in result.findings]
    rendered = render(ws.instance(template, "vars = { NAME = 'kern', N = 7 }").instances["i"])
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    assert rendered.text == env.from_string((ws.root / "t.cu.jinja").read_text()).render(**VARS)


def test_renders_on_many_threads_agree_with_one() -> None:
    """Nothing in rendering or mapping is shared between renders (no process-wide file ids)."""
    shipped = load_instances(TEMPLATES / "kls.toml").instances
    instances = [
        shipped[n] for n in ("sm90_bf16_4096_bias", "sm80_bf16_4096", "softmax_f32_4096x1024")
    ]
    alone = [render(i) for i in instances]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(render, instances * 6))
    for k, result in enumerate(together):
        expected = alone[k % len(instances)]
        assert result.text == expected.text
        assert result.source_map is not None and expected.source_map is not None
        assert result.source_map.origins == expected.source_map.origins


# --- property test --------------------------------------------------------------------------

# Tokens end in x, so that a token glued to a number (`w1` + `4`) cannot pass for another.
TOKEN = re.compile(r"[wW]\d+[xX]")
FILTERS = [
    "trim",
    "indent(4)",
    "indent(2, true)",
    "length",
    "upper",
    "replace(' ', '  ')",
    "format()",
    "center(40)",
    "wordwrap(12)",
]


@dataclass
class Piece:
    """A fragment of template text: `produce[r]` is the tokens that its line r may write to
    the output stream directly; `emits` all tokens it may output (for a buffer around it)."""

    text: str
    produce: dict[int, set[str]] = field(default_factory=dict)
    emits: set[str] = field(default_factory=set)


@dataclass
class Gen:
    counter: int = 0
    files: dict[str, str] = field(default_factory=dict)
    produce: dict[str, dict[int, set[str]]] = field(default_factory=dict)
    emits: dict[str, set[str]] = field(default_factory=dict)

    def token(self) -> str:
        self.counter += 1
        return f"w{self.counter}x"

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"


def join(pieces: list[Piece], seps: list[str]) -> Piece:
    text, produce, emits = "", dict[int, set[str]](), set[str]()
    for piece, sep in zip(pieces, seps, strict=True):
        base = text.count("\n")
        for r, tokens in piece.produce.items():
            produce.setdefault(base + r, set()).update(tokens)
        emits |= piece.emits
        text += piece.text + sep
    return Piece(text, produce, emits)


def buffered(piece: Piece, text: str, line: int) -> Piece:
    """A statement whose output (everything `piece` emits) is written from its line `line`."""
    return Piece(text, {line: set(piece.emits)}, set(piece.emits))


@st.composite
def tag(draw: st.DrawFn, body: str, kind: str = "%") -> str:
    left, right = draw(st.sampled_from(["", "-"])), draw(st.sampled_from(["", "-"]))
    close = {"%": "%}", "{": "}}"}[kind]
    return f"{{{kind}{left} {body} {right}{close}"


@st.composite
def literal(draw: st.DrawFn, g: Gen) -> Piece:
    lines = []
    produce: dict[int, set[str]] = {}
    for r in range(draw(st.integers(1, 3))):
        indent = draw(st.sampled_from(["", "  ", "    "]))
        words = [g.token() for _ in range(draw(st.integers(0, 2)))]
        produce[r] = set(words)
        lines.append(indent + " ".join(words))
    return Piece("\n".join(lines), produce, set().union(*produce.values()))


@st.composite
def expression(draw: st.DrawFn, g: Gen, in_loop: bool) -> Piece:
    t1, t2 = g.token(), g.token()
    choices = [
        "NAME",
        "N * 2",
        f"'{t1}' | upper",
        f"'{t1} {t2}' | center(20)",
        f"'{t1} %s' | format(N)",
        f"'{t1} {t2} {t1}' | wordwrap(6)",
    ]
    if in_loop:
        choices += ["loop.index", "loop.length", f"loop.cycle('{t1}', '{t2}')", "loop.first"]
    text = draw(tag(draw(st.sampled_from(choices)), "{"))
    tokens = {t.lower() for t in TOKEN.findall(text)}
    return Piece(text, {0: tokens}, tokens)


def body(draw: st.DrawFn, g: Gen, depth: int, in_loop: bool) -> Piece:
    pieces = draw(st.lists(piece(g, depth + 1, in_loop), min_size=1, max_size=3))
    seps = draw(
        st.lists(st.sampled_from(["", "\n", "\n  "]), min_size=len(pieces), max_size=len(pieces))
    )
    return join(pieces, seps)


@st.composite
def piece(draw: st.DrawFn, g: Gen, depth: int, in_loop: bool = False) -> Piece:
    kinds = ["literal", "expression", "raw"]
    if depth < 3:
        kinds += ["set", "filter", "macro", "for", "if", "include"]
    kind = draw(st.sampled_from(kinds))
    if kind == "literal":
        return draw(literal(g))
    if kind == "expression":
        return draw(expression(g, in_loop))
    if kind == "raw":
        t1, t2 = g.token(), g.token()
        sep = draw(st.sampled_from(["", "\n"]))
        text = draw(tag("raw")) + f"{t1} {{{{ {t2} }}}}{sep}{{# c #}}" + draw(tag("endraw"))
        return Piece(text, {0: {t1, t2}, text.count("\n"): {t1, t2}}, {t1, t2})
    if kind == "set":
        name = g.name("s")
        inner = body(draw, g, depth, in_loop)
        flt = draw(st.sampled_from(["", *FILTERS]))
        use = draw(tag(f"{name} | {flt}" if flt else name, "{"))
        sep = draw(st.sampled_from(["", "\n"]))
        text = draw(tag(f"set {name}")) + inner.text + draw(tag("endset")) + sep + use
        return buffered(inner, text, text.count("\n"))
    if kind == "filter":
        inner = body(draw, g, depth, in_loop)
        flt = draw(st.sampled_from(FILTERS))
        text = draw(tag(f"filter {flt}")) + inner.text + draw(tag("endfilter"))
        return buffered(inner, text, 0)
    if kind == "macro":
        name, arg = g.name("m"), g.token()
        inner = body(draw, g, depth, False)
        caller_body = body(draw, g, depth, False)
        flt = draw(st.sampled_from(["", *FILTERS]))
        call = "caller()" + (f" | {flt}" if flt else "")
        definition = (
            draw(tag(f"macro {name}(a)"))
            + inner.text
            + draw(tag("a", "{"))
            + draw(tag(call, "{"))
            + draw(tag("endmacro"))
        )
        sep = draw(st.sampled_from(["", "\n"]))
        use = draw(tag(f"call {name}('{arg}')")) + caller_body.text + draw(tag("endcall"))
        emitted = inner.emits | caller_body.emits | {arg}
        text = definition + sep + use
        return Piece(text, {definition.count("\n") + sep.count("\n"): emitted}, emitted)
    if kind == "for":
        inner = body(draw, g, depth, True)
        head = draw(tag(f"for i in range({draw(st.integers(0, 3))})"))
        text = head + inner.text + draw(tag("endfor"))
        return Piece(text, inner.produce, inner.emits)
    if kind == "if":
        yes, no = body(draw, g, depth, in_loop), body(draw, g, depth, in_loop)
        head = draw(tag(draw(st.sampled_from(["if N > 3", "if N < 3"]))))
        middle = draw(tag("else"))
        text = head + yes.text + middle + no.text + draw(tag("endif"))
        produce = dict(yes.produce)
        for r, tokens in no.produce.items():
            produce.setdefault(r + (head + yes.text + middle).count("\n"), set()).update(tokens)
        return Piece(text, produce, yes.emits | no.emits)
    # include: a new file, made of pieces one level deeper
    name = f"inc{g.name('')}.cuh.jinja"
    inner = body(draw, g, depth, False)
    g.files[name], g.produce[name], g.emits[name] = inner.text, inner.produce, inner.emits
    text = draw(tag(f"include '{name}'"))
    # Written directly, the included file's lines map into it; inside a buffer, to the
    # statement that emits the buffer (buffered() above).
    return Piece(text, {}, set(inner.emits))


@st.composite
def templates(draw: st.DrawFn) -> Gen:
    g = Gen()
    main = body(draw, g, 0, False)
    g.files["t.cu.jinja"] = main.text + draw(st.sampled_from(["", "\n"]))
    g.produce["t.cu.jinja"], g.emits["t.cu.jinja"] = main.produce, main.emits
    return g


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(templates())
def test_generated_templates_render_exactly_like_jinja_and_map_honestly(g: Gen) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result, plain = render_both(root, g.files)
        assert result.text == plain
        if plain is None:  # kls reports what plain Jinja raised
            assert result.findings
            return
        assert result.findings == []
        assert result.text is not None and result.source_map is not None
        lines = result.text.split("\n")
        assert len(result.source_map.origins) == len(lines)
        for i, line in enumerate(lines):
            origin = result.source_map.origin(i)
            if origin is None:  # nothing was written at all
                assert result.text == "", (i, line)
                continue
            name = Path(origin.path).name
            assert name in g.files
            assert 0 <= origin.line < len(g.files[name].split("\n"))
            first = line.split()[0] if line.split() else ""
            if TOKEN.fullmatch(first):
                # The line's first word comes from the template line it maps to.
                assert first.lower() in g.produce[name].get(origin.line, set()), (
                    i,
                    line,
                    name,
                    origin.line,
                    g.files,
                )
