"""Static checks of Triton templates per instance (kls.checks.triton_static): no torch needed.

Each rule has a mutant: a copy of a torch 2.11 template made at test time (never stored), or a
template of kls's own, with the rule's mistake planted; the finding must land on the planted
line. Every shipped Triton template checked with a plausible instance gives no error."""

from __future__ import annotations

from pathlib import Path

import pytest

from kls.checks.run import check_paths
from kls.checks.triton_static import triton_findings
from kls.findings import Finding, Severity
from kls.instances import load_instances
from kls.template.model import parse_template
from tests.upstream import needs_torch_source, require_torch_source

# kls's own kernel: a scaled copy of a 3-d tensor (not Inductor's text).
OWN = """{{def_kernel("X", "S")}}
    pid = tl.program_id(0).to(INDEX_DTYPE)
    n0 = {{size("X", 0)}}
    n2 = {{size("X", -1)}}
    sx0, sx1, sx2 = {{stride("X")}}
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n0 * n2
    {{load_input("X", "x", ("offs",), mask="mask")}}
    {% if SCALED %}
    x = x * tl.load(S)
    {% endif %}
    {{store_output(("offs",), "x", "mask")}}
"""

MM_VARS = {
    "BLOCK_M": 64,
    "BLOCK_N": 64,
    "BLOCK_K": 32,
    "GROUP_M": 8,
    "EVEN_K": True,
    "ALLOW_TF32": False,
    "USE_FAST_ACCUM": False,
    "ACC_TYPE": "tl.float32",
}


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    return str(value)


def _project(
    folder: Path,
    text: str,
    tensors: dict[str, list[int]],
    variables: dict[str, object],
    name: str = "k.py.jinja",
) -> tuple[Path, Path]:
    """A template copy and a kls.toml with one triton instance `k` (inline tables)."""
    template = folder / name
    template.write_text(text)
    lines = ["[instances.k]", 'profile = "triton"', f'template = "{name}"']
    for t, shape in tensors.items():
        lines.append(f'tensors.{t} = {{ shape = {shape}, dtype = "bf16" }}')
    lines.append("[instances.k.vars]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in variables.items()]
    config = folder / "kls.toml"
    config.write_text("\n".join(lines) + "\n")
    return template, config


def _findings(
    folder: Path,
    text: str,
    tensors: dict[str, list[int]],
    variables: dict[str, object],
    name: str = "k.py.jinja",
) -> list[Finding]:
    template, config = _project(folder, text, tensors, variables, name)
    loaded = load_instances(config)
    assert not [f for f in loaded.findings if f.severity == Severity.ERROR], loaded.findings
    return triton_findings(parse_template(text), str(template), loaded.instances["k"])


OWN_TENSORS = {"X": [4, 8, 16], "S": [1], "out": [512]}


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if needle in line)


def test_kls_own_template_checks_clean(tmp_path: Path) -> None:
    assert _findings(tmp_path, OWN, OWN_TENSORS, {"BLOCK": 64, "SCALED": True}) == []


@pytest.mark.parametrize(
    ("old", "new", "code", "words"),
    [
        ('def_kernel("X", "S")', 'def_kernel("X")', "KT803", "passes 2"),
        ('size("X", -1)', 'size("Y", -1)', "KT802", "no buffer 'Y'"),
        ('size("X", -1)', 'size("X", 3)', "KT806", "rank 3"),
        ('size("X", -1)', "size(None, 1)", "KT806", "the output has rank 1"),
        ("sx0, sx1, sx2 =", "sx0, sx1 =", "KT807", "renders 3 strides"),
        ("{% if SCALED %}", "{% if SCALE %}", "KT808", "'SCALE'"),
        (
            '    {{store_output(("offs",), "x", "mask")}}',
            '        {{store_output(("offs",), "x", "mask")}}',
            "KT810",
            "column 8",
        ),
        (
            '{{load_input("X", "x", ("offs",), mask="mask")}}',
            '{{load_input("X", "x", ("offs",), mask="mask", indent_width=8)}}',
            "KT810",
            "indent_width=8",
        ),
    ],
)
def test_each_mistake_in_kls_own_template_lands_on_its_line(
    tmp_path: Path, old: str, new: str, code: str, words: str
) -> None:
    assert old in OWN
    planted = OWN.replace(old, new, 1)
    found = _findings(tmp_path, planted, OWN_TENSORS, {"BLOCK": 64, "SCALED": True})
    assert [f.code for f in found] == [code], [f.format_line() for f in found]
    assert found[0].range.start.line == _line(planted, new.strip().split("\n")[0])
    assert words in found[0].message


def test_a_second_call_on_one_render_path(tmp_path: Path) -> None:
    load = '    {{load_input("X", "x", ("offs",), mask="mask")}}\n'
    twice = OWN.replace(load, load + load, 1)
    found = _findings(tmp_path, twice, OWN_TENSORS, {"BLOCK": 64, "SCALED": True})
    assert [(f.code, f.range.start.line) for f in found] == [("KT805", 8)]
    assert "load_input('X')" in found[0].message and "line 8" in found[0].message
    defs = OWN.replace('{{def_kernel("X", "S")}}\n', '{{def_kernel("X", "S")}}\n' * 2, 1)
    found = _findings(tmp_path, defs, OWN_TENSORS, {"BLOCK": 64, "SCALED": True})
    assert [(f.code, f.range.start.line) for f in found] == [("KT805", 1)]
    # Exclusive branches, or each call under its own condition: not reported.
    branches = OWN.replace(
        load, "    {% if SCALED %}\n" + load + "    {% else %}\n" + load + "    {% endif %}\n"
    )
    assert _findings(tmp_path, branches, OWN_TENSORS, {"BLOCK": 64, "SCALED": True}) == []
    guarded = OWN.replace(
        load,
        "    {% if SCALED %}\n" + load + "    {% endif %}\n"
        "    {% if not SCALED %}\n" + load + "    {% endif %}\n",
    )
    assert _findings(tmp_path, guarded, OWN_TENSORS, {"BLOCK": 64, "SCALED": True}) == []
    # Unconditional and conditional: both run when SCALED is set.
    once_more = OWN.replace("    x = x * tl.load(S)\n", "    x = x * tl.load(S)\n" + load)
    found = _findings(tmp_path, once_more, OWN_TENSORS, {"BLOCK": 64, "SCALED": True})
    assert [(f.code, f.range.start.line) for f in found] == [("KT805", 10)]


@pytest.mark.parametrize(
    ("value", "words"),
    [("float32 x", "not valid Python"), ("ieee", "\"'ieee'\"")],
)
def test_a_config_value_that_prints_as_bad_python(tmp_path: Path, value: str, words: str) -> None:
    found = _findings(tmp_path, OWN, OWN_TENSORS, {"BLOCK": 64, "SCALED": True, "ACC_TYPE": value})
    assert [f.code for f in found] == ["KT809"]
    config = (tmp_path / "kls.toml").read_text().split("\n")
    assert found[0].path == str(tmp_path / "kls.toml")
    assert config[found[0].range.start.line].startswith("ACC_TYPE =")
    assert found[0].range.start.column == 0 and words in found[0].message
    quoted = {"BLOCK": 64, "SCALED": True, "ACC_TYPE": "tl.float32", "P": "'ieee'"}
    assert _findings(tmp_path, OWN, OWN_TENSORS, quoted) == []


def test_indices_beyond_int32(tmp_path: Path) -> None:
    uncast = OWN.replace("tl.program_id(0).to(INDEX_DTYPE)", "tl.program_id(0)")
    big = {"X": [2048, 2048, 1024], "S": [1], "out": [2048 * 2048 * 1024]}
    found = _findings(tmp_path, uncast, big, {"BLOCK": 64, "SCALED": True})
    assert [(f.code, f.range.start.line) for f in found] == [("KT811", 1)]
    assert found[0].severity == Severity.WARNING
    assert "tl.int64" in found[0].message and "4,294,967,296 elements" in found[0].message
    assert _findings(tmp_path, OWN, big, {"BLOCK": 64, "SCALED": True}) == []  # cast
    assert _findings(tmp_path, uncast, OWN_TENSORS, {"BLOCK": 64, "SCALED": True}) == []


def test_check_paths_reports_them_with_the_instance(tmp_path: Path) -> None:
    planted = OWN.replace('size("X", -1)', 'size("X", 5)')
    _project(tmp_path, planted, OWN_TENSORS, {"BLOCK": 64, "SCALED": True, "ACC": "a b"})
    found = check_paths([tmp_path]).findings
    codes = {(f.code, Path(f.path).name, f.instance) for f in found}
    assert ("KT806", "k.py.jinja", "k") in codes and ("KT809", "kls.toml", "k") in codes


# -- torch 2.11's own templates -----------------------------------------------------------------

MM = {"A": [256, 512], "B": [512, 128], "out": [256, 128]}
BMM = {"A": [4, 256, 512], "B": [4, 512, 128], "out": [4, 256, 128]}
SCALED = {**MM, "A_inverse_scale": [256, 1], "B_inverse_scale": [1, 128]}
SCALED = {k: SCALED[k] for k in ("A", "B", "A_inverse_scale", "B_inverse_scale", "out")}
ATTN = {"Q": [2, 4, 256, 64], "K": [2, 4, 256, 64], "V": [2, 4, 256, 64]}
SPARSE = {
    "KV_NUM_BLKS": [2, 4, 2],
    "KV_IDX": [2, 4, 2, 2],
    "FULL_KV_NUM_BLKS": [2, 4, 2],
    "FULL_KV_IDX": [2, 4, 2, 2],
}
FLEX = {**ATTN, "LSE": [2, 4, 256], "MAX": [2, 4, 256], **SPARSE, "out": [2, 4, 256, 64]}
DECODE = {
    "Q": [2, 2, 2, 1, 64],
    "K": [2, 2, 256, 64],
    "V": [2, 2, 256, 64],
    "M": [2, 2, 4, 1],
    "L": [2, 2, 4, 1],
    **SPARSE,
    "out": [2, 2, 4, 1, 64],
}
BACKWARD = {
    **ATTN,
    "LSE": [2, 4, 256],
    "DELTA": [2, 4, 256],
    "DO": [2, 4, 256, 64],
    "DQ": [2, 4, 256, 64],
    "DV": [2, 4, 256, 64],
    "KV_NUM_BLKS": [2, 4, 2],
    "KV_IDX": [2, 4, 2, 2],
    "Q_NUM_BLKS": [2, 4, 2],
    "Q_IDX": [2, 4, 2, 2],
    "FULL_KV_NUM_BLKS": [2, 4, 2],
    "FULL_KV_IDX": [2, 4, 2, 2],
    "FULL_Q_NUM_BLKS": [2, 4, 2],
    "FULL_Q_IDX": [2, 4, 2, 2],
    "out": [2, 4, 256, 64],
}
GROUPED = {"a_ptr": [4, 256, 512], "b_ptr": [4, 512, 128], "out": [4, 256, 128]}
GROUPED_VARS = {
    **MM_VARS,
    "SCALED": False,
    "A_IS_2D": False,
    "B_IS_2D": False,
    "A_IS_K_MAJOR": True,
    "B_IS_K_MAJOR": False,
    "USE_TMA_LOAD": False,
    "USE_EXPERIMENTAL_MAKE_TENSOR_DESCRIPTOR": False,
    "NUM_SMS": 132,
}
FLEX_VARS = {"USE_TMA": False, "BLOCK_M": 64, "BLOCK_N": 64, "SM_SCALE": 0.125}
FLEX_VARS["FLOAT32_PRECISION"] = "'ieee'"

# Every Triton template under kernel/templates and kernel/flex/templates (not the CuTe DSL
# ones): a plausible instance each.
UPSTREAM = {
    "templates/triton_mm.py.jinja": (MM, MM_VARS),
    "templates/triton_mm_rocm.py.jinja": (MM, MM_VARS),
    "templates/triton_bmm.py.jinja": (BMM, MM_VARS),
    "templates/triton_persistent_tma_mm.py.jinja": (
        MM,
        {**MM_VARS, "TMA_EXPERIMENTAL_API": False, "NUM_SMS": 132, "TMA_SIZE": 128},
    ),
    "templates/triton_blackwell_ws_persistent_device_tma_mm.py.jinja": (
        MM,
        {**MM_VARS, "NUM_SMS": 148, "EPILOGUE_SUBTILE": False},
    ),
    "templates/triton_epilogue_scaled_mm.py.jinja": (
        SCALED,
        {**MM_VARS, "TMA_EXPERIMENTAL_API": False, "NUM_SMS": 132, "SCALE_RECIPE_A": 0},
    ),
    "templates/triton_main_loop_scaled_mm.py.jinja": (
        SCALED,
        {**MM_VARS, "SCALE_RECIPE_A": 5, "SCALE_RECIPE_B": 5, "NUM_SMS": 132},
    ),
    "templates/triton_mm_grouped.py.jinja": (GROUPED, GROUPED_VARS),
    "flex/templates/flex_attention.py.jinja": (FLEX, FLEX_VARS),
    "flex/templates/flex_decode.py.jinja": (DECODE, FLEX_VARS),
    "flex/templates/flex_backwards.py.jinja": (BACKWARD, FLEX_VARS),
    "flex/templates/common.py.jinja": (FLEX, FLEX_VARS),
    "flex/templates/utilities.py.jinja": (FLEX, FLEX_VARS),
}


def _upstream(relative: str) -> str:
    source = require_torch_source()
    return (source.package / "_inductor/kernel" / relative).read_text(encoding="utf-8")


@needs_torch_source
def test_every_shipped_triton_template_is_listed() -> None:
    kernel = require_torch_source().package / "_inductor/kernel"
    shipped = {
        str(p.relative_to(kernel))
        for folder in ("templates", "flex/templates")
        for p in (kernel / folder).glob("*.py.jinja")
        if not p.name.startswith(("cutedsl_", "flash_attention"))
    }
    assert shipped == set(UPSTREAM)


@needs_torch_source
@pytest.mark.parametrize("relative", sorted(UPSTREAM))
def test_torch_templates_check_clean_with_a_plausible_instance(
    tmp_path: Path, relative: str
) -> None:
    tensors, variables = UPSTREAM[relative]
    text = _upstream(relative)
    found = _findings(tmp_path, text, tensors, variables, Path(relative).name)
    assert [f.format_line() for f in found] == []


# Mutants of torch's own templates: (template, the text replaced, its replacement, the code).
MUTANTS = [
    ("templates/triton_mm.py.jinja", '{{def_kernel("A", "B")}}', '{{def_kernel("A")}}', "KT803"),
    ("templates/triton_mm.py.jinja", '{{size("B", 1)}}', '{{size("C", 1)}}', "KT802"),
    ("templates/triton_bmm.py.jinja", '{{stride("B", 2)}}', '{{stride("B", 3)}}', "KT806"),
    (
        "flex/templates/flex_attention.py.jinja",
        "stride_qz, stride_qh, stride_qm, stride_qk = {{",
        "stride_qz, stride_qh, stride_qm = {{",
        "KT807",
    ),
    ("templates/triton_mm.py.jinja", "{% if not EVEN_K %}", "{% if not EVEN_KK %}", "KT808"),
    (
        "templates/triton_mm.py.jinja",
        'indent_width=8, index_shape=("BLOCK_M"',
        'indent_width=4, index_shape=("BLOCK_M"',
        "KT810",
    ),
    (
        "flex/templates/common.py.jinja",
        "{{gen_defines() | indent_except_first(1)}}",
        "{{gen_defines() | indent_except_first(2)}}",
        "KT810",
    ),
]


@needs_torch_source
@pytest.mark.parametrize(("relative", "old", "new", "code"), MUTANTS)
def test_a_mistake_in_a_torch_template_copy_lands_on_its_line(
    tmp_path: Path, relative: str, old: str, new: str, code: str
) -> None:
    text = _upstream(relative)
    assert old in text
    planted = text.replace(old, new, 1)  # made here, never stored
    tensors, variables = UPSTREAM[relative]
    found = _findings(tmp_path, planted, tensors, variables, Path(relative).name)
    assert [f.code for f in found] == [code], [f.format_line() for f in found]
    assert found[0].range.start.line == _line(planted, new.split("\n")[0])


@needs_torch_source
def test_twice_and_int32_in_torch_template_copies(tmp_path: Path) -> None:
    text = _upstream("templates/triton_mm.py.jinja")
    load = text[text.index('        {{load_input("B"') :]
    load = load[: load.index("}}\n") + 3]
    planted = text.replace(load, load + load, 1)
    found = _findings(tmp_path, planted, MM, MM_VARS)
    second = planted.index(load) + len(load)
    assert [(f.code, f.range.start.line) for f in found] == [
        ("KT805", planted[:second].count("\n"))
    ]
    uncast = text.replace("tl.program_id(0).to(INDEX_DTYPE)", "tl.program_id(0)", 1)
    big = {"A": [65536, 65536], "B": [65536, 128], "out": [65536, 128]}
    found = _findings(tmp_path, uncast, big, MM_VARS)
    assert [(f.code, f.range.start.line) for f in found] == [
        ("KT811", _line(uncast, "pid = tl.program_id(0)"))
    ]


def test_kls_rules_lists_the_triton_rules(capsys: pytest.CaptureFixture[str]) -> None:
    from kls.cli import main

    assert main(["rules", "--profile", "triton"]) == 0
    own = [
        line.split("\t")[1]
        for line in capsys.readouterr().out.split("\n")
        if line.startswith("rule\t")
    ]
    assert {"KT802", "KT806", "KT807", "KT808", "KT809", "KT810", "KT811", "KT862"} <= set(own)
    assert all(code.startswith("KT8") for code in own)
