"""Every rule: one template that triggers it at the exact expected range, one that does not."""

from __future__ import annotations

import pytest

from kls.checks.catalogue import RULES
from kls.checks.run import check_file
from kls.findings import Severity
from kls.render import Limits, render
from tests.conftest import Workspace, codes, find_span, only, span

GOOD = """\
{{template.header().getvalue()}}
{{template.globals().getvalue()}}
extern "C" {
{{kernel.def_kernel(inputs=[X, W], outputs=[Y], names_str="X, W, Y")}} {
  if (workspace_size) { *workspace_size = 0; return 0; }
  {{kernel.check_not_null(X)}}
  const void* a = {{kernel.ptr(X)}};
  const void* b = {{kernel.ptr(W)}};
  void* c = {{kernel.ptr(Y)}};
  return 0;
}
}
"""


def variant(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


def test_good_template_is_clean(ws: Workspace) -> None:
    assert ws.check(GOOD).findings == []


def test_every_rule_has_a_summary() -> None:
    for code, rule in RULES.items():
        assert code.startswith("KT") and rule.summary and rule.name


# -- KT1xx Jinja -----------------------------------------------------------------------------


def test_kt101_unclosed_block_points_at_its_opening_tag(ws: Workspace) -> None:
    text = variant("  return 0;\n}", "  {% for i in range(2) %}\n  return 0;\n}")
    f = only(ws.check(text).findings, "KT101")
    assert span(f) == find_span(text, "{% for i in range(2) %}")


def test_kt101_unknown_end_tag(ws: Workspace) -> None:
    text = variant("  return 0;", "  return 0; {% endif %}")
    f = only(ws.check(text).findings, "KT101")
    assert span(f) == find_span(text, "endif")


def test_kt102_undefined_name_with_suggestion(ws: Workspace) -> None:
    text = variant("void* c = {{kernel.ptr(Y)}};", "void* c = {{kernel.ptr(Yy)}};")
    f = only(ws.check(text).findings, "KT102")
    assert span(f) == find_span(text, "Yy")
    assert "did you mean 'Y'" in f.message


def test_kt103_helper_raises(ws: Workspace) -> None:
    text = variant("  return 0;", '  int r = {{kernel.size(X, "a")}};\n  return 0;')
    f = only(ws.check(text).findings, "KT103")
    assert f.range.start.line == find_span(text, "kernel.size")[0]


def test_kt104_unbounded_output_is_cut(ws: Workspace) -> None:
    text = (
        "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}"
    )
    instances = ws.instance(text)
    result = render(instances.instances["i"], limits=Limits(seconds=10, max_bytes=1 << 20))
    assert result.text is None
    assert [f.code for f in result.findings] == ["KT104"]
    assert "MB" in result.findings[0].message


def test_kt104_time_bound(ws: Workspace) -> None:
    text = "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}"
    instances = ws.instance(text)
    result = render(instances.instances["i"], limits=Limits(seconds=0.2))
    assert [f.code for f in result.findings] == ["KT104"]


def test_kt105_not_utf8(ws: Workspace) -> None:
    path = ws.root / "bad.cu.jinja"
    path.write_bytes(b"// ok\n// caf\xe9\n")
    f = only(check_file(path).findings, "KT105")
    assert f.range.start.line == 1


def test_clean_has_no_kt1xx(ws: Workspace) -> None:
    assert not [c for c in codes(ws.check(GOOD).findings) if c.startswith("KT1")]


# -- KT2xx signature and buffer names ---------------------------------------------------------


def test_kt201_names_count_static(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y"', 'names_str="X, Y"')
    f = only(ws.check(text).findings, "KT201")
    assert span(f) == find_span(text, '"X, Y"')


def test_kt201_names_count_at_render_time(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y"', "names_str=names")
    result = ws.check(text, extra='vars = { names = "X, W" }')
    f = only(result.findings, "KT201")
    assert span(f) == find_span(text, "names", 1)
    assert "2 name(s)" in f.message


def test_kt213_permuted_names_at_each_swapped_name(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y"', 'names_str="X, Y, W"')
    found = [f for f in ws.check(text).findings if f.code == "KT213"]
    line, col, _, _ = find_span(text, '"X, Y, W"')
    assert [span(f) for f in found] == [
        (line, col + 4, line, col + 5),
        (line, col + 7, line, col + 8),
    ]
    assert "buffer W" in found[0].message and "buffer Y" in found[0].message
    assert found[0].severity == Severity.ERROR


def test_kt213_permuted_names_at_render_time(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y"', "names_str=names")
    result = ws.check(text, extra='vars = { names = "W, X, Y" }')
    found = [f for f in result.findings if f.code == "KT213"]
    assert [span(f) for f in found] == [find_span(text, "names", 1)]
    assert "buffer X" in found[0].message and "'W'" in found[0].message
    assert "1 more" in found[0].message


def test_kt213_other_names_are_not_a_swap(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y"', 'names_str="a, b, out"')
    assert "KT213" not in codes(ws.check(text).findings)


def test_kt202_reorder_length(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y")', 'names_str="X, W, Y", input_reorder=[1])')
    f = only(ws.check(text).findings, "KT202")
    assert span(f) == find_span(text, "[1]")


def test_kt203_reorder_not_permutation_static(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y")', 'names_str="X, W, Y", input_reorder=[0, 0])')
    f = only(ws.check(text).findings, "KT203")
    assert span(f) == find_span(text, "[0, 0]")


def test_kt203_reorder_from_instance(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y")', 'names_str="X, W, Y", input_reorder=input_reorder)')
    f = only(ws.check(text, extra="input_reorder = [1, 2]").findings, "KT203")
    assert span(f) == find_span(text, "input_reorder", 1)
    assert "out of range" in f.message


def test_kt204_undeclared_buffer(ws: Workspace) -> None:
    text = variant(
        'inputs=[X, W], outputs=[Y], names_str="X, W, Y"',
        'inputs=[X], outputs=[Y], names_str="X, Y"',
    )
    f = only(ws.check(text).findings, "KT204")
    line, col, _, _ = find_span(text, "ptr(W)")
    assert span(f) == (line, col + 4, line, col + 5)
    assert "nullptr" in f.message


def test_kt205_declared_never_used(ws: Workspace) -> None:
    text = variant("  const void* b = {{kernel.ptr(W)}};\n", "")
    f = only(ws.check(text).findings, "KT205")
    assert f.severity == Severity.WARNING
    assert span(f) == find_span(
        text, 'kernel.def_kernel(inputs=[X, W], outputs=[Y], names_str="X, W, Y")'
    )


def test_kt206_duplicate_buffer(ws: Workspace) -> None:
    text = variant(
        'inputs=[X, W], outputs=[Y], names_str="X, W, Y"',
        'inputs=[X, X], outputs=[Y], names_str="X, W, Y"',
    )
    f = only(ws.check(text).findings, "KT206")
    line, col, _, _ = find_span(text, "[X, X]")
    assert (f.range.start.line, f.range.start.column) == (line, col + 4)


def test_kt207_invalid_c_identifier(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y"', 'names_str="X, 1W, Y"')
    f = only(ws.check(text).findings, "KT207")
    assert span(f) == find_span(text, "1W")


def test_kt208_reserved_c_name(ws: Workspace) -> None:
    text = variant('names_str="X, W, Y"', 'names_str="X, stream, Y"')
    f = only(ws.check(text).findings, "KT208")
    assert span(f) == find_span(text, "stream", 0)


def test_kt209_missing_def_kernel(ws: Workspace) -> None:
    f = only(ws.check("// no kernel here\n").findings, "KT209")
    assert f.range.start.line == 0


def test_kt210_def_kernel_twice(ws: Workspace) -> None:
    text = GOOD + '{{kernel.def_kernel(inputs=[X, W], outputs=[Y], names_str="X, W, Y")}}\n'
    f = only(ws.check(text).findings, "KT210")
    assert f.range.start.line == text.count("\n") - 1


def test_kt211_helper_before_def_kernel(ws: Workspace) -> None:
    text = "// {{kernel.ptr(X)}}\n" + GOOD
    f = only(ws.check(text).findings, "KT211")
    assert span(f) == find_span(text, "kernel.ptr(X)")


def test_kt212_not_a_buffer(ws: Workspace) -> None:
    text = variant("inputs=[X, W]", 'inputs=["X", W]')
    f = only(ws.check(text).findings, "KT212")
    assert f.range.start.line == 3


# -- KT3xx helper calls -----------------------------------------------------------------------


def test_kt301_missing_argument(ws: Workspace) -> None:
    text = variant("{{kernel.ptr(X)}}", "{{kernel.ptr()}}")
    f = only(ws.check(text).findings, "KT301")
    assert span(f) == find_span(text, "kernel.ptr()")


def test_kt301_too_many_and_unknown_keyword(ws: Workspace) -> None:
    text = variant(
        "  return 0;",
        "  int s = {{kernel.stride(X, 0, 1, 2)}} + {{kernel.size(X, 0, dflt=1)}};\n  return 0;",
    )
    found = [f for f in ws.check(text).findings if f.code == "KT301"]
    assert sorted(span(f) for f in found) == sorted(
        [
            find_span(text, "2)")[:2] + (find_span(text, "2)")[0], find_span(text, "2)")[1] + 1),
            find_span(text, "dflt=1"),
        ]
    )


def test_kt302_index_out_of_rank(ws: Workspace) -> None:
    text = variant("  return 0;", "  int s = {{kernel.stride(X, 2)}};\n  return 0;")
    f = only(ws.check(text).findings, "KT302")
    assert span(f) == find_span(text, "2)}}")[:2] + (
        find_span(text, "2)}}")[0],
        find_span(text, "2)}}")[1] + 1,
    )
    # The batch idiom (negative index before the first dim) is not an error.
    fine = variant("  return 0;", "  int s = {{kernel.stride(X, -3)}};\n  return 0;")
    assert "KT302" not in codes(ws.check(fine).findings)


def test_kt303_missing_getvalue(ws: Workspace) -> None:
    text = variant("{{template.header().getvalue()}}", "{{template.header()}}")
    f = only(ws.check(text).findings, "KT303")
    assert span(f) == find_span(text, "template.header()")


def test_kt305_unknown_helper(ws: Workspace) -> None:
    text = variant("{{kernel.ptr(W)}}", "{{kernel.pointer(W)}}")
    f = only(ws.check(text).findings, "KT305")
    assert span(f) == find_span(text, "pointer")
    assert "did you mean 'ptr'" in f.message


def test_kt306_neither_row_nor_column_major(ws: Workspace) -> None:
    text = variant("  return 0;", "  int ld = {{kernel.row_or_column_stride(X)}};\n  return 0;")
    tensors = (
        'tensors.X = { shape = [256, 128], dtype = "bf16", stride = [256, 2] }\n'
        'tensors.W = { shape = [128, 64], dtype = "bf16" }\n'
        'tensors.Y = { shape = [256, 64], dtype = "bf16" }\n'
    )
    f = only(ws.check(text, tensors=tensors).findings, "KT306")
    assert span(f) == find_span(text, "X)}};\n  return")[:2] + (
        find_span(text, "X)}};\n  return")[0],
        find_span(text, "X)}};\n  return")[1] + 1,
    )


# -- KT4xx the C contract ---------------------------------------------------------------------


def test_kt401_entry_outside_extern_c(ws: Workspace) -> None:
    text = variant('extern "C" {\n', "").replace("  return 0;\n}\n}\n", "  return 0;\n}\n")
    f = only(ws.check(text).findings, "KT401")
    assert f.range.start.line == find_span(text, "kernel.def_kernel")[0]


def test_kt402_null_check_before_workspace_query(ws: Workspace) -> None:
    query = "  if (workspace_size) { *workspace_size = 0; return 0; }\n"
    check = "  {{kernel.check_not_null(X)}}\n"
    text = GOOD.replace(query + check, check + query)
    f = only(ws.check(text).findings, "KT402")
    assert span(f) == find_span(text, "{{kernel.check_not_null(X)}}")


def test_kt403_no_workspace_query(ws: Workspace) -> None:
    text = variant("  if (workspace_size) { *workspace_size = 0; return 0; }\n", "")
    f = only(ws.check(text).findings, "KT403")
    assert f.severity == Severity.WARNING


# -- KT5xx rendered CUDA ----------------------------------------------------------------------


def test_kt501_rendered_syntax_error_maps_to_template_line(ws: Workspace) -> None:
    text = variant("  void* c = {{kernel.ptr(Y)}};", "  void* c = {{kernel.ptr(Y)}} +;")
    f = only(ws.check(text).findings, "KT501")
    assert span(f) == find_span(text, "void* c = {{kernel.ptr(Y)}} +;")


# -- noqa -------------------------------------------------------------------------------------


def test_noqa_silences_one_rule_on_its_line(ws: Workspace) -> None:
    text = variant(
        "{{template.header().getvalue()}}", "{{template.header()}} {# kls: noqa KT303 #}"
    )
    assert "KT303" not in codes(ws.check(text).findings)
    other = variant(
        "{{template.header().getvalue()}}", "{{template.header()}} {# kls: noqa KT201 #}"
    )
    assert "KT303" in codes(ws.check(other).findings)


# -- KT0xx config -----------------------------------------------------------------------------


def test_kt001_invalid_toml_points_at_line(ws: Workspace) -> None:
    result = ws.config('[instances.a]\ntemplate = "t.cu.jinja"\nbeta = = 1\n')
    f = only(result.findings, "KT001")
    assert f.range.start.line == 2


def test_kt002_wrong_type(ws: Workspace) -> None:
    ws.write("t.cu.jinja", GOOD)
    result = ws.config('[instances.a]\ntemplate = "t.cu.jinja"\nalpha = "one"\n')
    f = only(result.findings, "KT002")
    assert (f.range.start.line, f.range.start.column) == (2, 0)


def test_kt002_unknown_dtype_in_inline_table(ws: Workspace) -> None:
    ws.write("t.cu.jinja", GOOD)
    result = ws.config(
        '[instances.a]\ntemplate = "t.cu.jinja"\ntensors.X = { shape = [4, 4], dtype = "bf61" }\n'
    )
    f = only(result.findings, "KT002")
    assert f.range.start.line == 2
    assert f.range.start.column == result.findings[0].range.start.column
    assert "did you mean 'bf16'" in f.message


def test_kt003_unknown_key_with_suggestion(ws: Workspace) -> None:
    ws.write("t.cu.jinja", GOOD)
    result = ws.config('[instances.a]\ntemplate = "t.cu.jinja"\ninput_reoder = [1, 0]\n')
    f = only(result.findings, "KT003")
    assert f.range.start.line == 2
    assert "did you mean 'input_reorder'" in f.message


def test_kt004_missing_template(ws: Workspace) -> None:
    result = ws.config('[instances.a]\ntemplate = "nope.cu.jinja"\n')
    f = only(result.findings, "KT004")
    assert f.range.start.line == 1


def test_kt005_unknown_op_with_suggestion(ws: Workspace) -> None:
    op = "cutlass_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align9"
    instances = ws.instance(GOOD, extra=f'arch = "80"\nop = "{op}"')
    rendered = render(instances.instances["i"])
    assert [x.code for x in rendered.findings] == ["KT005"]
    assert rendered.findings[0].site is not None
    assert rendered.findings[0].site.line == 3
    assert "did you mean 'cutlass_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align8'" in (
        rendered.findings[0].message
    )


def test_kt006_no_instances(ws: Workspace) -> None:
    result = ws.config('[defaults]\narch = "80"\n')
    assert only(result.findings, "KT006").severity == Severity.WARNING


@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_codes_are_stable_format(code: str) -> None:
    assert len(code) == 5 and code[2:].isdigit()
