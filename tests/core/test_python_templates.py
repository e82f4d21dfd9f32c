"""Templates read in place from string constants of Python files (`file.py::CONSTANT`).

kls reads the constant with `ast` (never imports or runs the file) and reports every position in
the .py file's own lines and columns: raw and plain strings, escapes, implicit concatenation,
line continuations, the opening quote's column. The GEMM tests read a copy of torch 2.11.0's own
gemm_template.py made at test time from the torch source (tests/upstream.py); its five GEMM
templates must check clean in place under `torch-2.11`, and planted mistakes land on its lines.
"""

from __future__ import annotations

import ast
import asyncio
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient, client_capabilities

from kls.checks.run import check_file, check_paths
from kls.compile.diagnostics import NvccMessage, map_messages
from kls.instances import load_instances
from kls.lsp.protocol import PREVIEW_COMMAND
from kls.positions import Position, Range
from kls.render import render
from kls.template.pysource import PyConstant, PyProblem, python_constants
from kls.template.source import (
    MAX_PYTHON_BYTES,
    TemplateRef,
    findings_to_file,
    source_map_to_file,
)
from tests.e2e.helpers import SERVER, change_doc, initialize
from tests.upstream import gemm_project, needs_torch_source

DATA = gemm_project()  # a copy of the torch source's gemm_template.py, made at test time
GEMM_PY = DATA / "gemm_template.py"
KLS = str(Path(sys.executable).parent / "kls")
UPSTREAM = (
    "GEMM_TEMPLATE_CUTLASS_3X",
    "GEMM_ARGS_CUTLASS_3X",
    "GEMM_ARGS_CUTLASS_3X_EPILOGUE",
    "GEMM_TEMPLATE_CUTLASS_2X",
    "GEMM_ARGS_CUTLASS_2X",
)
CUDA_TENSORS = 'tensors.X = { shape = [4, 4], dtype = "f32" }\n'


def where(text: str, needle: str, nth: int = 0) -> Position:
    """The (0-based) position of the `nth` occurrence of `needle` in `text`."""
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at)
    return Position(line, at - (text.rfind("\n", 0, at) + 1))


def spelled(constant: PyConstant, text: str, k: int) -> str:
    return text[constant.starts[k] : constant.ends[k]]


# --- reading constants: what each character of the value is written as --------------------------


def test_raw_triple_quoted_maps_one_for_one_from_the_opening_quote() -> None:
    src = 'X = 1\nTEMPLATE = r"""first {{ a }}\n  second \\n {{ b }}\n"""\n'
    c = python_constants(src).constants["TEMPLATE"]
    assert isinstance(c, PyConstant) and c.raw
    assert c.value == "first {{ a }}\n  second \\n {{ b }}\n"
    assert c.to_file(Position(0, 0)) == Position(1, 15)  # just after r"""
    assert c.to_file(Position(0, 9)) == where(src, "a }}")
    assert c.to_file(Position(1, 15)) == where(src, "b }}")
    assert c.line == 1
    assert all(src[c.starts[k]] == ch for k, ch in enumerate(c.value))


def test_escapes_continuations_and_implicit_concatenation() -> None:
    src = textwrap.dedent(
        """\
        T: str = (
            "a\\tb {{ x }}\\n"  # a comment between the parts
            'c\\
        d{{ y }}'
            r'\\q{{ z }}' "\\x41\\u00e9\\N{BULLET}\\101\\q"
        )
        """
    )
    c = python_constants(src).constants["T"]
    assert isinstance(c, PyConstant) and not c.raw
    assert c.value == "a\tb {{ x }}\ncd{{ y }}\\q{{ z }}Aé•A\\q"
    # every character's spelling in the file is that character, or an escape that means it
    for k, ch in enumerate(c.value):
        spelling = spelled(c, src, k)
        assert spelling == ch or (spelling[0] == "\\" and ast.literal_eval(f'"{spelling}"') == ch)
    assert spelled(c, src, 1) == "\\t"
    assert spelled(c, src, c.value.index("é")) == "\\u00e9"
    assert c.to_file(Position(0, 7)) == where(src, "x }}")
    assert c.to_file(Position(1, 1)) == where(src, "d{{ y")  # after the continuation
    assert c.to_file(Position(1, 5)) == where(src, "y }}")
    assert c.to_file(Position(1, 14)) == where(src, "z }}")
    # a range ending at a part's last character does not run over the quotes to the next part
    end_of_y = c.value.index("\\q")
    rng = c.range_to_file(Range(Position(1, 2), Position(1, end_of_y - c.value.index("c"))))
    assert rng.end == where(src, "'\n    r'")


def test_non_ascii_before_the_string_and_a_crlf_file() -> None:
    src = 'NOTE = "é"; T = "ü{{ bad }}"\r\nU = """\r\n{{ u }}\r\n"""\r\n'
    module = python_constants(src)
    t, u = module.constants["T"], module.constants["U"]
    assert isinstance(t, PyConstant) and isinstance(u, PyConstant)
    assert t.to_file(Position(0, 1)) == Position(0, 18)  # columns in characters, not bytes
    assert u.value == "\n{{ u }}\n"
    assert u.to_file(Position(1, 3)) == Position(2, 3)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ('f"{{ x }} {y}"', "f-string"),
        ('"a" + str(1)', "joined with + from a part"),
        ('"a" + LATER', "joined with + from 'LATER'"),
        ('"{} x".format(1)', "format(...)"),
        ('"%s" % "x"', "%-formatting"),
        ('b"x"', "bytes constant"),
        ("OTHER", "another name ('OTHER')"),
    ],
)
def test_constants_computed_when_python_runs_are_refused(value: str, said: str) -> None:
    found = python_constants(f"OTHER = 'x'\nT = {value}\n").constants["T"]
    assert isinstance(found, PyProblem)
    assert said in found.message and found.line == 1


def test_from_file_maps_only_inside_the_string() -> None:
    src = 'T = "ab" \\\n    "cd"\n'
    c = python_constants(src).constants["T"]
    assert isinstance(c, PyConstant)
    assert c.from_file(Position(0, 5)) == Position(0, 0)
    assert c.from_file(Position(0, 7)) == Position(0, 2)  # a cursor just after "b"
    assert c.from_file(Position(1, 5)) == Position(0, 2)
    assert c.from_file(Position(0, 1)) is None  # the name
    assert c.from_file(Position(0, 4)) is None  # the opening quote
    assert c.from_file(Position(0, 9)) is None  # between the parts


def test_a_file_that_does_not_parse_says_where() -> None:
    module = python_constants("T = '''x\n\ndef (:\n")
    assert module.error is not None and module.constants == {}


# --- the five upstream templates, in place --------------------------------------------------------


@needs_torch_source
def test_upstream_templates_check_clean_in_place() -> None:
    instances = load_instances(DATA / "kls.toml")
    assert instances.findings == []
    used = {TemplateRef.parse(s).constant for s in instances.sources_in(GEMM_PY)}
    assert used == set(UPSTREAM)
    result = check_file(GEMM_PY, instances=instances)
    assert [f.format_line() for f in result.findings] == []
    assert sorted(result.renders) == sorted(instances.instances)
    assert all(r.ok for r in result.renders.values())


@needs_torch_source
def test_kls_check_on_the_python_file_and_its_config() -> None:
    for target in (GEMM_PY, DATA / "kls.toml", DATA):
        proc = subprocess.run([KLS, "check", str(target)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "0 error(s)" in proc.stderr and "4 instance(s) rendered" in proc.stderr


# --- planted mistakes land on the .py file's own line and column ----------------------------------


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A copy of the test data with three mistakes inside the constants."""
    for name in ("gemm_template.py", "kls.toml"):
        shutil.copy(DATA / name, tmp_path / name)
    py = tmp_path / "gemm_template.py"
    text = py.read_text()
    text = text.replace("kernel.batch_stride(X)", "kernel.batch_strid(X)", 1)  # KT305, static
    text = text.replace("kernel.stride(X, -2)", "kernel.stride(X, 7)", 1)  # KT302, render time
    second = text.index("PT_EXPORT {{kernel_call_signature}}", text.index("CUTLASS_2X = r"))
    text = text[:second] + text[second:].replace("{{kernel_call_signature}}", "{{signature}}", 1)
    py.write_text(text)  # KT102 in the 2.x main template (the 3.x one renders its sub-templates)
    return py


@needs_torch_source
def test_planted_mistakes_are_reported_at_the_py_line_and_column(planted: Path) -> None:
    text = planted.read_text()
    result = check_file(planted, instances=load_instances(planted.parent / "kls.toml"))
    assert all(f.path == str(planted) for f in result.findings)
    at = {(f.code, f.range.start) for f in result.findings}
    assert ("KT305", where(text, "batch_strid")) in at  # static, in the 3.x argument template
    assert ("KT302", where(text, "7)")) in at  # render time, an argument's exact column
    typo = where(text, "{{signature}}")
    assert ("KT102", Position(typo.line, typo.column + 2)) in at  # the 2.x main template
    lines = {where(text, s).line for s in ("batch_strid", "7)", "{{signature}}")}
    assert {f.range.start.line for f in result.findings} == lines
    constants = python_constants(text).constants.values()
    for f in result.findings:  # every range lies inside a template string
        assert any(
            isinstance(c, PyConstant)
            and c.from_file(f.range.start) is not None
            and c.from_file(f.range.end) is not None
            for c in constants
        ), f


@needs_torch_source
def test_kls_check_prints_the_py_position(planted: Path) -> None:
    proc = subprocess.run([KLS, "check", str(planted)], capture_output=True, text=True)
    assert proc.returncode == 1
    p = where(planted.read_text(), "batch_strid")
    assert f"{planted}:{p.line + 1}:{p.column + 1}: KT305" in proc.stdout


@needs_torch_source
def test_noqa_inside_a_constant(planted: Path) -> None:
    text = planted.read_text().replace(
        '"batch_stride_x")}}', '"batch_stride_x")}}{# kls: noqa KT305 #}', 1
    )
    planted.write_text(text)
    result = check_file(planted, instances=load_instances(planted.parent / "kls.toml"))
    assert "KT305" not in {f.code for f in result.findings}


@needs_torch_source
def test_editor_text_wins_over_the_file(planted: Path) -> None:
    clean = GEMM_PY.read_text()
    result = check_file(planted, text=clean, instances=load_instances(planted.parent / "kls.toml"))
    assert result.findings == []


@needs_torch_source
def test_source_map_and_line_directives_name_py_lines() -> None:
    spec = load_instances(DATA / "kls.toml").instances["sm90_bf16"]
    result = render(spec)
    assert result.text is not None and result.source_map is not None
    mapped = source_map_to_file(result.source_map)
    py_lines = GEMM_PY.read_text().split("\n")
    rendered = result.text.split("\n")
    checked = 0
    for i, origin in enumerate(mapped.origins):
        if origin is None:
            continue
        assert origin.path in (str(GEMM_PY.resolve()),)
        line = rendered[i].strip()
        if line and "{{" not in py_lines[origin.line] and line in py_lines[origin.line]:
            checked += 1
    assert checked > 40
    assert f'"{GEMM_PY.resolve()}"' in mapped.line_directives(result.text)
    proc = subprocess.run(
        [KLS, "render", str(GEMM_PY), "--instance", "sm90_bf16", "--source-map"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    signature_line = where(GEMM_PY.read_text(), "PT_EXPORT {{kernel_call_signature}}").line
    assert f"gemm_template.py:{signature_line + 1} | PT_EXPORT int" in proc.stdout


@needs_torch_source
def test_nvcc_errors_map_to_the_py_file() -> None:
    spec = load_instances(DATA / "kls.toml").instances["sm90_bf16"]
    result = render(spec)
    assert result.text is not None
    rendered = result.text.split("\n")
    row = next(i for i, line in enumerate(rendered) if "hw_info.sm_count == 0" in line)
    message = NvccMessage("kernel.cu", row + 1, "error", 'identifier "hw_info" is undefined')
    message.column = rendered[row].index("hw_info")
    found = findings_to_file(map_messages([message], Path("/x/kernel.cu"), result))
    assert len(found) == 1 and found[0].path == str(GEMM_PY.resolve())
    assert found[0].range.start == where(GEMM_PY.read_text(), "hw_info.sm_count == 0")


# --- kls.toml: what a `file.py::NAME` may name ----------------------------------------------------


def _project(tmp_path: Path, py: str, template: str) -> Path:
    (tmp_path / "t.py").write_text(textwrap.dedent(py))
    (tmp_path / "kls.toml").write_text(f'[instances.a]\ntemplate = "{template}"\n{CUDA_TENSORS}')
    return tmp_path / "kls.toml"


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("t.py::TEMPLAT", "no module-level constant 'TEMPLAT' (did you mean 'TEMPLATE'?)"),
        ("t.py::FANCY", "is an f-string"),
        ("t.py::JOINED", "joined with + from a part"),
        ("t.py::FORMATTED", "format(...)"),
        ("missing.py::TEMPLATE", "template file not found: missing.py"),
        ("kls.toml::TEMPLATE", "only a Python file (.py) holds template constants"),
        ("../t.py::TEMPLATE", "outside"),
    ],
)
def test_config_names_a_constant_kls_cannot_read(tmp_path: Path, template: str, said: str) -> None:
    project = tmp_path / "p"
    project.mkdir()
    config = _project(
        project,
        """\
        TEMPLATE = "// {{ kernel_name }}"
        FANCY = f"// {1}"
        JOINED = "a" + str(1)
        FORMATTED = "// {}".format(1)
        """,
        template,
    )
    instances = load_instances(config)
    assert instances.instances == {}
    [finding] = instances.findings
    assert finding.code == "KT004" and said in finding.message, finding.message
    assert finding.range.start.line == 1  # the `template = ...` line of kls.toml


def test_plain_string_template_with_escapes_end_to_end(tmp_path: Path) -> None:
    config = _project(
        tmp_path,
        """\
        import os  # the file is never run: this import is never executed

        HEADER = "// \\t{{ kernel_name }}\\n"  "// {{ oops }}\\n"
        """,
        "t.py::HEADER",
    )
    py = tmp_path / "t.py"
    result = check_file(py, instances=load_instances(config))
    [finding] = result.findings
    assert finding.code == "KT102" and finding.path == str(py.resolve())
    assert finding.range.start == where(py.read_text(), "oops")
    assert finding.range.end == where(py.read_text(), ' }}\\n"\n')


def test_first_line_after_the_opening_quote(tmp_path: Path) -> None:
    config = _project(tmp_path, 'X = 0\nBODY = r"""{{ nope }}\n"""\n', "t.py::BODY")
    py = tmp_path / "t.py"
    [finding] = check_file(py, instances=load_instances(config)).findings
    assert finding.range.start == Position(1, 14)


def test_a_constant_removed_in_the_editor_is_reported_on_the_file(tmp_path: Path) -> None:
    config = _project(tmp_path, 'T = "// {{ kernel_name }}"\n', "t.py::T")
    py = tmp_path / "t.py"
    instances = load_instances(config)
    result = check_file(py, text='T = f"// {1}"\n', instances=instances)
    [finding] = result.findings
    assert finding.code == "KT105" and "f-string" in finding.message
    assert finding.path == str(py.resolve()) and finding.range.start.line == 0


def test_python_file_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    config = _project(
        tmp_path,
        f"""\
        open({str(marker)!r}, "w").write("ran")
        T = "// {{{{ kernel_name }}}}"
        """,
        "t.py::T",
    )
    codes = {f.code for f in check_paths([tmp_path / "t.py"]).findings}
    assert not {c for c in codes if c < "KT200"}, codes  # read and rendered
    assert load_instances(config).instances
    assert not marker.exists()


# --- the language server on the Python file -------------------------------------------------------


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient) -> AsyncIterator[None]:
    published: list[lsp.PublishDiagnosticsParams] = []
    lsp_client.published = published  # type: ignore[attr-defined]
    lsp_client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = published.append
    await initialize(lsp_client, client_capabilities("visual-studio-code"))
    yield
    await lsp_client.shutdown_session()


async def published_for(client: LanguageClient, uri: str, version: int) -> list[lsp.Diagnostic]:
    log: list[lsp.PublishDiagnosticsParams] = client.published  # type: ignore[attr-defined]
    for _ in range(400):
        for params in log:
            if params.uri == uri and params.version == version:
                return list(params.diagnostics)
        await asyncio.wait_for(
            client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 60
        )
    raise AssertionError("no diagnostics")


def _lsp(p: Position) -> lsp.Position:
    return lsp.Position(line=p.line, character=p.column)


@needs_torch_source
@pytest.mark.asyncio
async def test_language_server_in_a_python_file(client: LanguageClient, planted: Path) -> None:
    text = planted.read_text()
    uri = planted.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    diagnostics = await published_for(client, uri, 1)
    starts = {(d.code, d.range.start.line, d.range.start.character) for d in diagnostics}
    p = where(text, "batch_strid")
    assert ("KT305", p.line, p.column) in starts
    p = where(text, "7)")
    assert ("KT302", p.line, p.column) in starts
    constants = [c for c in python_constants(text).constants.values() if isinstance(c, PyConstant)]
    for d in diagnostics:  # only inside the template strings
        start = Position(d.range.start.line, d.range.start.character)
        assert any(c.from_file(start) is not None for c in constants), d

    # hover on a helper inside GEMM_ARGS_CUTLASS_3X: its rendering, its range in the .py
    at = where(text, "gemm_mode()}}")  # before the planted KT305, which stops the render
    hover = await client.text_document_hover_async(
        lsp.HoverParams(lsp.TextDocumentIdentifier(uri), _lsp(at))
    )
    assert hover is not None and hover.range is not None
    assert hover.range.start.line == at.line and hover.range.start.character <= at.column
    assert "Renders to (instance `sm90_bf16`)" in str(hover.contents)
    assert "GemmUniversalMode::kGemm" in str(hover.contents)
    # ... and nothing on Python code, which belongs to the Python extension
    outside = where(text, "class CUTLASSGemmTemplate")
    assert (
        await client.text_document_hover_async(
            lsp.HoverParams(lsp.TextDocumentIdentifier(uri), _lsp(outside))
        )
        is None
    )

    # completion after `kernel.` inside a constant (editor text with the dot just typed)
    typed = text.replace("    {{template.gemm_mode()}},", "    {{kernel.}}", 1)
    change_doc(client, uri, 2, typed)
    dot = where(typed, "{{kernel.}}")
    items = await client.text_document_completion_async(
        lsp.CompletionParams(
            lsp.TextDocumentIdentifier(uri), lsp.Position(line=dot.line, character=dot.column + 9)
        )
    )
    labels = {i.label for i in (items.items if isinstance(items, lsp.CompletionList) else items)}
    assert {"batch_stride", "ptr", "stride"} <= labels
    change_doc(client, uri, 3, text)

    # go to definition of `argument_template` in the main template: GEMM_ARGS_CUTLASS_3X
    use = where(text, "render_gemm_arguments(argument_template")
    use = Position(use.line, use.column + len("render_gemm_arguments("))
    found = await client.text_document_definition_async(
        lsp.DefinitionParams(lsp.TextDocumentIdentifier(uri), _lsp(use))
    )
    assert isinstance(found, lsp.Location) and found.uri == uri
    opening = 'GEMM_ARGS_CUTLASS_3X = r"""'
    assert found.range.start == _lsp(Position(where(text, opening).line, len(opening)))

    # code lenses above the two main templates; Preview renders the instance
    lenses = await client.text_document_code_lens_async(
        lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri))
    )
    titles = {(lens.range.start.line, lens.command.title) for lens in lenses if lens.command}
    assert (where(text, "GEMM_TEMPLATE_CUTLASS_3X = r").line, "Preview (sm90_bf16)") in titles
    assert (where(text, "GEMM_TEMPLATE_CUTLASS_2X = r").line, "Preview (sm80_bf16)") in titles
    answer = await client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command=PREVIEW_COMMAND, arguments=[uri, "sm80_bf16"])
    )
    assert answer["instance"] == "sm80_bf16"


def test_a_python_file_beyond_the_bound_is_one_finding(tmp_path: Path) -> None:
    config = _project(tmp_path, 'T = "// {{ kernel_name }}"\n', "t.py::T")
    py = tmp_path / "t.py"
    huge = 'T = "// {{ kernel_name }}"\n' + "#" * (MAX_PYTHON_BYTES + 1) + "\n"
    [finding] = check_file(py, text=huge, instances=load_instances(config)).findings
    assert finding.code == "KT105" and "larger than" in finding.message


def test_the_python_file_is_never_run(tmp_path: Path) -> None:
    """Checking and rendering a constant never executes the module: its top-level code, which
    would write a marker file, does not run (nor in the render worker)."""
    marker = tmp_path / "RAN"
    config = _project(
        tmp_path,
        f"""\
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("ran")
        BODY = "// {{{{ kernel_name }}}}\\n"
        """,
        "t.py::BODY",
    )
    instances = load_instances(config)
    result = check_file(tmp_path / "t.py", instances=instances)
    assert result.renders["a"].ok and result.renders["a"].text == "// kls_a"
    assert not marker.exists()
