"""tree-sitter's errors in rendered CUDA, parsed incrementally in render workers, are exactly a
fresh parse's; the worker's parse gives the same KT501 findings as the server's."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from kls.checks.rendered import Models
from kls.checks.syntax import syntax_findings
from kls.cuda_syntax import ATTRIBUTE_MACROS, blank_attribute_macros, error_nodes
from kls.instances import load_instances
from kls.render import render
from kls.sandbox.workers import render_isolated
from tests.conftest import TEMPLATES

SPEC = load_instances(TEMPLATES / "kls.toml").instances["sm90_bf16_4096_bias"]
RENDERED = render(SPEC).text or ""
SNIPPETS = ["{", "}", ";", "(", "int x = ", "))", "\n", "/*", "*/", "#if 0\n", "template <", ""]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(RENDERED)), st.integers(0, 40), st.sampled_from(SNIPPETS)),
        min_size=1,
        max_size=8,
    )
)
def test_incremental_parse_reports_what_a_fresh_parse_reports(
    edits: list[tuple[int, int, str]],
) -> None:
    text = RENDERED
    key = f"test-{id(edits)}"
    assert error_nodes(text, key) == error_nodes(text) == []
    for at, length, insert in edits:
        at = min(at, len(text))
        text = text[:at] + insert + text[at + length :]
        assert error_nodes(text, key) == error_nodes(text)


def test_worker_parse_gives_the_servers_findings() -> None:
    broken = SPEC.template.read_text().replace("CUTLASS_CHECK(status);", "CUTLASS_CHECK(status", 1)
    result = render_isolated(SPEC, {SPEC.template.resolve(): broken})
    assert result.syntax is not None and result.syntax.errors  # parsed in the worker
    models = Models({})
    found = syntax_findings(result, models)
    assert [f.code for f in found] == ["KT501"]
    # A render made in this process is parsed by a worker too, with the same findings.
    assert found == syntax_findings(replace(result, syntax=None), models)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["PT_EXPORT", "CUTLASS_DEVICE", "CUTLASS_HOST_DEVICE", "CUTLASS_GLOBAL", "#define "]
            + ["#define", " ", "\n", "x", "_", "é", "(", "CUTLASS_", "HOST_DEVICE"]
        ),
        max_size=10,
    )
)
def test_attribute_macros_are_blanked_as_the_plain_pattern_blanks_them(parts: list[str]) -> None:
    text = "".join(parts)
    expected = ATTRIBUTE_MACROS.sub(lambda m: " " * len(m.group(0)), text)
    assert blank_attribute_macros(text) == expected
