"""Compiled template code shared by texts of one shape (kls.sourcemap.template_shape): an edit
of template data only reuses the code and swaps the data; what is rendered and mapped is the
same as a fresh compile and exactly plain Jinja's."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kls import render as render_module
from kls.instances import InstanceSpec, load_instances
from kls.render import RenderResult, render
from kls.sourcemap import _lex_shape, template_shape
from kls.template import model as model_module
from kls.template.model import TemplateModel, parse_template
from tests.conftest import TEMPLATES
from tests.core.test_render_exact import TOKEN, Gen, render_both, templates

TAG = re.compile(r"(\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\})", re.DOTALL)


def edit_data(text: str, suffix: str) -> str:
    """`text` with every generated word outside tags (template data) changed: the same shape."""
    parts = TAG.split(text)
    for i in range(0, len(parts), 2):
        parts[i] = TOKEN.sub(lambda m: m.group(0) + suffix, parts[i])
    return "".join(parts)


def shape_keys() -> set[object]:
    return {k for k in render_module._CODE_CACHE if len(k) == 2}


def fresh(result: RenderResult) -> RenderResult:
    """The same instance rendered with no compiled code cached."""
    saved = dict(render_module._CODE_CACHE)
    render_module._CODE_CACHE.clear()
    try:
        return render(result.instance)
    finally:
        render_module._CODE_CACHE.update(saved)


def same(a: RenderResult, b: RenderResult) -> None:
    assert a.text == b.text
    assert (a.source_map and a.source_map.origins) == (b.source_map and b.source_map.origins)
    assert [(f.code, f.message, f.site) for f in a.findings] == [
        (f.code, f.message, f.site) for f in b.findings
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(templates())
def test_a_data_edit_reuses_the_code_and_renders_like_jinja(g: Gen) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _, plain = render_both(root, g.files)
        keys = shape_keys()
        edited = {**g.files, "t.cu.jinja": edit_data(g.files["t.cu.jinja"], "q")}
        second, plain_edited = render_both(root, edited)
        assert second.text == plain_edited
        if edited["t.cu.jinja"] != g.files["t.cu.jinja"] and plain is not None:
            assert not shape_keys() - keys  # nothing compiled: the data was swapped
        same(second, fresh(second))
        if plain_edited is not None:
            assert second.findings == []


def test_shape_ignores_data_and_keeps_lines_and_code() -> None:
    env = jinja2.Environment()
    a = template_shape(env, "int a;\n{{ x }} b\n{% if y %}c{% endif %}\n", "t", "t")
    b = template_shape(env, "float q; // hi\n{{ x }} zz\n{% if y %}d{% endif %}\n", "t", "t")
    assert a is not None and b is not None
    assert a.key == b.key and a.data != b.data
    for other in (
        "int a;\n{{ z }} b\n{% if y %}c{% endif %}\n",  # a name
        "int a;\n\n{{ x }} b\n{% if y %}c{% endif %}\n",  # a line more: positions move
        "int a;\n{{ x }}  \n{% if y %}c{% endif %}\n",  # blank data is part of the shape
        "int a;\n{{ x }} b\n{%- if y %}c{% endif %}\n",  # whitespace control
    ):
        shape = template_shape(env, other, "t", "t")
        assert shape is not None and shape.key != a.key, other
    assert template_shape(env, "{{ 'x }}", "t", "t") is None  # a lexing error: compiled as text


def test_shipped_template_comment_edit_then_code_edit_match_fresh_renders() -> None:
    spec = load_instances(TEMPLATES / "kls.toml").instances["sm90_bf16_4096_bias"]
    path = spec.template.resolve()
    text = path.read_text()
    # From an empty code cache: a text another test rendered may still be cached by its text
    # while its shape was evicted (the cache keeps 128 entries), which is not this test's case.
    render_module._CODE_CACHE.clear()
    render(spec, {path: text})
    keys = shape_keys()
    assert any(k[0] == str(path) for k in keys)  # type: ignore[index]
    comment = text.replace("// The exported entry", "// The exported entry, edited,", 1)
    assert comment != text
    edited = render(spec, {path: comment})
    assert not shape_keys() - keys
    assert edited.text is not None and "// The exported entry, edited," in edited.text
    same(edited, fresh_with(spec, comment))
    # An edit of Jinja code compiles anew, and a broken one reports Jinja's own error.
    code_edit = comment.replace("{{instance_definition}}", "{{ instance_definition }}", 1)
    assert code_edit != comment
    same(render(spec, {path: code_edit}), fresh_with(spec, code_edit))
    broken = comment.replace("{{instance_definition}}", "{{instance_definition", 1)
    result = render(spec, {path: broken})
    same(result, fresh_with(spec, broken))
    assert [f.code for f in result.findings] == ["KT101"]
    plain = render(spec, {path: comment}, mark=False)
    assert plain.text == edited.text


def fresh_with(spec: InstanceSpec, text: str) -> RenderResult:
    saved = dict(render_module._CODE_CACHE)
    render_module._CODE_CACHE.clear()
    try:
        return render(spec, {spec.template.resolve(): text})
    finally:
        render_module._CODE_CACHE.update(saved)


def model_facts(model: TemplateModel) -> tuple[object, ...]:
    return (
        model.syntax_error,
        model.free_variables,
        model.calls,
        model.expressions,
        model.statements,
        model.name_uses,
        model.noqa,
        model.tokens,
    )


def fresh_model(text: str) -> TemplateModel:
    saved = dict(model_module._PARSES)
    model_module._PARSES.clear()
    try:
        return parse_template.__wrapped__(text)
    finally:
        model_module._PARSES.update(saved)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(templates())
def test_a_data_edit_reuses_the_jinja_parse_and_models_like_a_fresh_parse(g: Gen) -> None:
    text = g.files["t.cu.jinja"]
    edited = edit_data(text, "q")
    first = parse_template.__wrapped__(text)
    second = parse_template.__wrapped__(edited)
    if edited != text and first.ast is not None:
        assert second.ast is first.ast  # parsed once for the shape
    assert model_facts(second) == model_facts(fresh_model(edited))


@pytest.mark.parametrize(
    ("good", "broken"),
    [
        ("a {% if x %}b{% endif %} c", "a {% if x %}bb{% endif %} cc"),
        ("a {% if x %}b c\nd", "aa {% if x %}bbb cc\ndd"),  # unclosed: the same error
        ("{% for %}x{% endfor %}", "{% for %}yy{% endfor %}"),
    ],
)
def test_same_shape_texts_get_their_own_syntax_error_ranges(good: str, broken: str) -> None:
    a, b = parse_template.__wrapped__(good), parse_template.__wrapped__(broken)
    assert model_facts(b) == model_facts(fresh_model(broken))
    assert (a.syntax_error is None) == (b.syntax_error is None)


def _data_spans(text: str) -> list[tuple[int, int]]:
    spans, at = [], 0
    for m in TAG.finditer(text):
        spans.append((at, m.start()))
        at = m.end()
    return [*spans, (at, len(text))]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    templates(),
    st.lists(
        st.tuples(
            st.floats(0, 1),
            st.integers(0, 3),
            st.text(alphabet="aab  {}%#-+\n\r", max_size=3),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_a_shape_seen_from_the_last_text_is_the_shape_lexed_afresh(
    g: Gen, edits: list[tuple[float, int, str]]
) -> None:
    env = jinja2.Environment()
    text = g.files["t.cu.jinja"]
    name = f"edited-{id(edits)}.cu.jinja"
    template_shape(env, text, name, name)
    for where, length, insert in edits:
        # Mostly inside template data, where an edit may keep the shape.
        outside = [i for m in _data_spans(text) for i in range(*m)] or [0]
        at = outside[int(where * (len(outside) - 1))]
        text = text[:at] + insert + text[at + length :]
        seen = template_shape(env, text, name, name)
        lexed = _lex_shape(env, text, name, name)
        if lexed is None:
            assert seen is None
            continue
        assert seen is not None
        assert (seen.key, seen.data, seen.spans) == (lexed.key, lexed.data, lexed.spans)
