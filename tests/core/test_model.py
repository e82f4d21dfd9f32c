"""The template model: exact positions from Jinja's own lexer and parser."""

from __future__ import annotations

from kls.positions import Position
from kls.template import parse_template

SOURCE = """\
{{template.header().getvalue()}} {# kls: noqa KT303, KT204 #}
{%- for i in range(2) %}
  {{ template.cute_int(kernel.stride(X, -2),
                       "s") }}
{% endfor %}
{% include "args.cuh.jinja" %}
{{kernel.def_kernel(inputs=[X, None], outputs=[Y], names_str="X, B, Y")}}
"""


def test_helper_calls_and_argument_ranges_are_exact() -> None:
    model = parse_template(SOURCE)
    stride = model.calls_to("kernel", "stride")[0]
    assert (stride.range.start, stride.range.end) == (Position(2, 23), Position(2, 43))
    x, minus_two = stride.args
    assert (x.value_range.start, minus_two.text) == (Position(2, 37), "-2")
    cute = model.calls_to("template", "cute_int")[0]
    assert cute.range.end == Position(3, 27)  # a call that spans two lines, up to its ")"
    assert cute.args[1].range.start == Position(3, 23)
    header = model.calls_to("template", "header")[0]
    assert header.followed_by == "getvalue"


def test_def_kernel_arguments_are_readable() -> None:
    model = parse_template(SOURCE)
    call = model.calls_to("kernel", "def_kernel")[0]
    inputs = call.arg(0, "inputs")
    assert inputs is not None
    refs = inputs.name_list(model.index)
    assert refs is not None and [r.name for r in refs] == ["X", None]
    names = call.arg(2, "names_str")
    assert names is not None and names.literal() == "X, B, Y"
    assert names.value_range.start == Position(6, 61)


def test_statements_noqa_and_free_names() -> None:
    model = parse_template(SOURCE)
    tags = [(s.tag, s.target) for s in model.statements]
    assert tags == [("for", "i"), ("endfor", None), ("include", "args.cuh.jinja")]
    assert model.is_silenced("KT303", 0) and model.is_silenced("KT204", 0)
    assert not model.is_silenced("KT201", 0) and not model.is_silenced("KT303", 1)
    assert {"template", "kernel", "X", "Y"} <= model.free_variables
    assert "i" not in model.free_variables


def test_syntax_errors_point_at_the_token() -> None:
    model = parse_template("a\n{% if x %}\n{% endfor %}\n")
    assert model.syntax_error is not None
    assert (model.syntax_error.range.start, model.syntax_error.range.end) == (
        Position(2, 3),
        Position(2, 9),
    )
    unclosed = parse_template("a\n  {% for x in y %}\nbody\n")
    assert unclosed.syntax_error is not None
    assert unclosed.syntax_error.range.start == Position(1, 2)
    half = parse_template("x = {{ kernel.ptr(X)\n")
    assert half.syntax_error is not None and half.syntax_error.range.start.line == 0
