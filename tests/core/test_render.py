"""Render semantics (Inductor's API) and the source map, on small templates and shipped ones."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from kls.checks.run import check_paths
from kls.instances import load_instances
from kls.profiles import profile
from kls.render import render
from kls.sourcemap import Origin
from tests.conftest import TEMPLATES, Workspace
from tests.upstream import torch_source

SHIPPED = load_instances(TEMPLATES / "kls.toml")
# Kls's own Jinja runs (the Triton instances are Inductor's renders: tests/core/test_triton.py).
JINJA = sorted(n for n, i in SHIPPED.instances.items() if profile(i.profile).language == "cuda")


def origins(ws: Workspace, template: str, extra: str = "", subs: dict[str, str] | None = None):
    for name, text in (subs or {}).items():
        ws.write(name, text)
    instances = ws.instance(template, extra)
    result = render(instances.instances["i"])
    assert result.ok, result.findings
    assert result.text is not None and result.source_map is not None
    lines = result.text.split("\n")
    return [(line, result.source_map.origin(i)) for i, line in enumerate(lines)]


def where(pairs, text: str) -> tuple[str, int]:
    for line, origin in pairs:
        if line == text:
            assert origin is not None
            return Path(origin.path).name, origin.line
    raise AssertionError(f"{text!r} not rendered: {[p[0] for p in pairs]}")


def test_plain_lines_map_to_themselves(ws: Workspace) -> None:
    pairs = origins(ws, "a\nb\n{{ X.name }}\nc\n")
    assert where(pairs, "a") == ("t.cu.jinja", 0)
    assert where(pairs, "X") == ("t.cu.jinja", 2)
    assert where(pairs, "c") == ("t.cu.jinja", 3)


def test_multiline_expression_maps_to_its_first_line_and_text_after_it(ws: Workspace) -> None:
    text = "x = {{ kernel.size(X,\n   0,\n   -1) }};\nafter\n"
    pairs = origins(ws, text)
    assert where(pairs, "x = 32768;") == ("t.cu.jinja", 0)
    assert where(pairs, "after") == ("t.cu.jinja", 3)


def test_multiline_output_of_one_expression(ws: Workspace) -> None:
    pairs = origins(ws, "top\n{{ body }}\nbottom\n", extra='vars = { body = "l1\\nl2\\nl3" }')
    assert [where(pairs, s) for s in ("l1", "l2", "l3")] == [("t.cu.jinja", 1)] * 3
    assert where(pairs, "bottom") == ("t.cu.jinja", 2)


def test_loops_map_every_iteration_to_the_body(ws: Workspace) -> None:
    pairs = origins(ws, "{% for i in range(3) %}\nrow {{ i }}\n{% endfor %}\nend\n")
    assert [where(pairs, f"row {i}") for i in range(3)] == [("t.cu.jinja", 1)] * 3
    assert where(pairs, "end") == ("t.cu.jinja", 3)


def test_whitespace_control_is_preserved_and_mapped(ws: Workspace) -> None:
    template = "a\n  {%- if true %}\nb\n  {%- endif %}\nc {{- ' d' }}\n"
    instances = ws.instance(template)
    marked = render(instances.instances["i"])
    plain = render(instances.instances["i"], mark=False)
    assert marked.text == plain.text == "a\nb\nc d"  # Jinja drops the final newline
    pairs = origins(ws, template)
    assert where(pairs, "b") == ("t.cu.jinja", 2)
    assert where(pairs, "c d") == ("t.cu.jinja", 4)


def test_includes_map_into_the_included_file(ws: Workspace) -> None:
    pairs = origins(
        ws, "main1\n{% include 'inc.cuh.jinja' %}\nmain3\n", subs={"inc.cuh.jinja": "i1\ni2\n"}
    )
    assert where(pairs, "i1") == ("inc.cuh.jinja", 0)
    assert where(pairs, "i2") == ("inc.cuh.jinja", 1)
    assert where(pairs, "main3") == ("t.cu.jinja", 2)


def test_sub_templates_map_into_their_files() -> None:
    result = render(SHIPPED.instances["sm90_bf16_4096_bias"])
    assert result.text is not None and result.source_map is not None
    lines = result.text.split("\n")
    arg = next(i for i, s in enumerate(lines) if "// StrideA dA" in s)
    epi = next(i for i, s in enumerate(lines) if "// StrideC dC" in s)
    main = next(i for i, s in enumerate(lines) if "gemm_op;" in s)
    args_text = (TEMPLATES / "cutlass3x_args.cuh.jinja").read_text().split("\n")
    epi_text = (TEMPLATES / "cutlass3x_epilogue.cuh.jinja").read_text().split("\n")
    o_arg, o_epi = result.source_map.origin(arg), result.source_map.origin(epi)
    assert o_arg is not None and o_epi is not None
    assert o_arg.path.endswith("cutlass3x_args.cuh.jinja") and "StrideA dA" in args_text[o_arg.line]
    assert o_epi.path.endswith("cutlass3x_epilogue.cuh.jinja")
    assert "StrideC dC" in epi_text[o_epi.line]
    o_main = result.source_map.origin(main)
    assert o_main is not None and o_main.path.endswith("cutlass3x_gemm.cu.jinja")


@pytest.mark.parametrize("name", JINJA)
def test_markers_never_change_the_output(name: str) -> None:
    instance = SHIPPED.instances[name]
    assert render(instance).text == render(instance, mark=False).text


@pytest.mark.parametrize("name", JINJA)
def test_every_rendered_line_of_shipped_instances_has_an_origin(name: str) -> None:
    result = render(SHIPPED.instances[name])
    assert result.text is not None and result.source_map is not None
    assert all(o is not None for o in result.source_map.origins)
    assert "\x1e" not in result.text and "\x1f" not in result.text


def test_literal_template_lines_land_on_identical_template_text() -> None:
    """Wherever a rendered line contains no Jinja output, it equals the template line it maps to."""
    for name in ("sm90_bf16_4096_bias", "sm80_bf16_4096", "softmax_bf16_8192x4096"):
        result = render(SHIPPED.instances[name])
        assert result.text is not None and result.source_map is not None
        files = {p: Path(p).read_text().split("\n") for p in result.files}
        checked = 0
        for i, line in enumerate(result.text.split("\n")):
            origin = result.source_map.origin(i)
            assert isinstance(origin, Origin)
            template_line = files[origin.path][origin.line]
            literal = not any(d in template_line for d in ("{{", "{%", "{#"))
            if literal and line.strip():
                assert line == template_line, (i, line, template_line)
                checked += 1
        assert checked > 20


def test_line_directives() -> None:
    result = render(SHIPPED.instances["softmax_f32_4096x1024"])
    assert result.text is not None and result.source_map is not None
    text = result.source_map.line_directives(result.text)
    directives = re.findall(r'#line (\d+) "([^"]+)"', text)
    assert directives and all(p.endswith("softmax.cu.jinja") for _, p in directives)
    # The line after each directive is the template line it names.
    src = (TEMPLATES / "softmax.cu.jinja").read_text().split("\n")
    lines = text.split("\n")
    for i, line in enumerate(lines[:-1]):
        m = re.match(r'#line (\d+) "', line)
        nxt = lines[i + 1]
        if m and "{{" not in src[int(m.group(1)) - 1] and nxt.strip():
            assert nxt == src[int(m.group(1)) - 1]


def test_signature_follows_input_reorder_like_inductor() -> None:
    result = render(SHIPPED.instances["sm90_bf16_4096_bias"])
    assert result.text is not None
    assert (
        "PT_EXPORT int kls_sm90_bf16_4096_bias(const bfloat16* Bias, const bfloat16* X, "
        "const bfloat16* W, bfloat16* Y, size_t* workspace_size, uint8_t* workspace, "
        "cudaStream_t stream)"
    ) in result.text
    assert [p.name for p in result.params] == ["Bias", "X", "W", "Y"]


def test_none_bias_gets_no_parameter_but_consumes_its_name() -> None:
    result = render(SHIPPED.instances["sm90_bf16_4096"])
    assert [p.name for p in result.params] == ["X", "W", "Y"]
    assert result.text is not None and "(cutlass::bfloat16_t*)(nullptr)" not in result.text
    assert "nullptr,  // ElementC const* ptr_C" in result.text


def test_swap_xw_with_bias_and_tma_epilogue_like_inductor() -> None:
    result = render(SHIPPED.instances["sm90_bf16_4096_bias"])
    assert result.op is not None and result.op.should_swap_xw
    assert result.text is not None
    assert "(cutlass::bfloat16_t*)(W),  // ptr_A" in result.text
    assert "{static_cast<coord_t>(N), static_cast<coord_t>(M)," in result.text


def test_cutlass2x_instance_definition_is_a_device_gemm_universal() -> None:
    result = render(SHIPPED.instances["sm80_bf16_4096"])
    assert result.op is not None and not result.op.is_3x
    assert result.text is not None
    assert "cutlass::gemm::device::GemmUniversal<" in result.text
    assert result.op.type_name.startswith("Operation_cutlass_tensorop_bf16_s16816gemm")


def test_shipped_templates_check_clean() -> None:
    """0 findings with a torch source; without one, only the note that the torch-2.11
    instances (Inductor's own templates) were skipped."""
    result = check_paths([TEMPLATES])
    expected = [] if torch_source() is not None else ["KT007"]
    if torch_source() is not None and importlib.util.find_spec("torch") is None:
        expected = ["KT800"]  # the Triton instances: static checks only, said once
    assert [f.code for f in result.findings] == expected
    assert sorted(result.renders) == sorted(SHIPPED.instances)


def test_unsaved_editor_text_overrides_the_file(ws: Workspace) -> None:
    instances = ws.instance("disk\n")
    path = ws.root / "t.cu.jinja"
    result = render(instances.instances["i"], overrides={path: "editor {{ X.name }}\n"})
    assert result.text == "editor X"


def test_newer_profile_predefines_the_kernel(ws: Workspace) -> None:
    """torch-2.11 (the old name inductor-2025 still reads): a plain CUDA kernel calls
    def_kernel itself and gets torch 2.11's signature (offsets as C parameters)."""
    template = (
        'extern "C" {\nPT_EXPORT {{kernel.def_kernel([X, W, Bias], [Y], "X, W, Bias, Y", '
        "input_reorder)}} {\n  return 0;\n}\n}\n"
    )
    tensors = (
        'tensors.X = { shape = [4, 8], dtype = "bf16" }\n'
        'tensors.W = { shape = [8, 2], dtype = "bf16" }\n'
        'tensors.Bias = { shape = [4, 2], dtype = "bf16", stride = [0, 1] }\n'
        'tensors.Y = { shape = [4, 2], dtype = "bf16" }\n'
    )
    instances = ws.instance(
        template, 'profile = "inductor-2025"\ninput_reorder = [2, 0, 1]', tensors
    )
    assert [f.code for f in instances.findings] == ["KT002"]
    result = render(instances.instances["i"])
    assert result.text is not None
    assert (
        "PT_EXPORT int kls_i(const __nv_bfloat16* Bias, const __nv_bfloat16* X, "
        "const __nv_bfloat16* W, __nv_bfloat16* Y, const int Bias_offset, const int X_offset, "
        "const int W_offset, const int Y_offset, size_t* workspace_size, uint8_t* workspace, "
        "cudaStream_t stream) {"
    ) in result.text
