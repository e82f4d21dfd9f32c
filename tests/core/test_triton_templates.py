"""torch 2.11's Triton templates beyond mm/bmm/persistent-TMA mm: the scaled and grouped mm
`.py.jinja` files and the inline `TritonTemplate(name=..., source=...)` ones (conv2d/conv3d,
mm_plus_mm, b2b gemm), each rendered by Inductor for its shipped instance (templates/kls.toml),
checked with no error, mapped line for line, and positioned in its own file; the ROCm and
Blackwell mm variants checked statically. Torch-backed tests skip without torch (and its
source) unless KLS_REQUIRE_TORCH=1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kls.checks.run import check_file, check_paths
from kls.checks.triton_static import triton_findings
from kls.findings import Severity
from kls.instances import load_instances
from kls.positions import Position
from kls.profiles.triton.align import align
from kls.sandbox.workers import render_isolated
from kls.template.model import parse_template
from kls.template.pysource import PyConstant, PyProblem, python_constants
from kls.template.source import TemplateRef, source_map_to_file
from tests.upstream import needs_torch, needs_torch_source, require_torch_source

SHIPPED = Path(__file__).parents[2] / "templates" / "kls.toml"
# The shipped instance of each template, by Inductor's registered name.
INSTANCES = {
    "scaled_mm_device_tma_epilogue_scaling": "triton_scaled_mm_rowwise_fp8",
    "scaled_mm_device_tma_main_loop_scaling": "triton_scaled_mm_blockwise_fp8",
    "grouped_mm": "triton_grouped_mm_moe_bf16",
    "scaled_grouped_mm": "triton_scaled_grouped_mm_moe_fp8",
    "convolution2d": "triton_conv2d_3x3_fp16",
    "convolution3d": "triton_conv3d_3x3x3_fp16",
    "mm_plus_mm": "triton_mm_plus_mm_bf16",
    "b2b_gemm_left": "triton_b2b_gemm_left_relu",
    "b2b_gemm_right": "triton_b2b_gemm_right",
}
INLINE = {
    "_inductor/kernel/conv.py": ("convolution2d", "convolution3d"),
    "_inductor/kernel/mm_plus_mm.py": ("mm_plus_mm",),
    "_inductor/fx_passes/b2b_gemm.py": ("b2b_gemm_left", "b2b_gemm_right"),
}


def _torch_file(relative: str) -> Path:
    return require_torch_source().package / relative


# -- reading the inline templates (no torch needed, only its source) --------------------------


@needs_torch_source
@pytest.mark.parametrize(("relative", "names"), sorted(INLINE.items()))
def test_inline_templates_are_read_by_their_registered_name(
    relative: str, names: tuple[str, ...]
) -> None:
    """Each `TritonTemplate(name=..., source=...)` is a template under its registered name,
    its text the source Python builds (joined pieces included), each character mapped to
    where it is written in the file."""
    text = _torch_file(relative).read_text(encoding="utf-8")
    module = python_constants(text)
    file_lines = text.split("\n")
    for name in names:
        found = module.constants[name]
        assert isinstance(found, PyConstant), found
        assert found.value.startswith('\n{{def_kernel("')
        assert f'name="{name}"' in file_lines[found.line]
        # Every template line is written on a file line whose text holds it.
        for k, line in enumerate(found.value.split("\n")):
            if line.strip():
                at = found.to_file(Position(k, len(line) - len(line.lstrip())))
                assert line.strip() in file_lines[at.line], (name, k, line)


@needs_torch_source
def test_a_piece_joined_in_maps_to_its_own_lines() -> None:
    """conv's loop body is a constant of its own joined into both conv2d branches: its lines
    map to the constant's lines, and a file position in it maps back to its first use."""
    text = _torch_file("_inductor/kernel/conv.py").read_text(encoding="utf-8")
    module = python_constants(text)
    body = module.constants["LOOP_BODY_2D"]
    conv = module.constants["convolution2d"]
    assert isinstance(body, PyConstant) and isinstance(conv, PyConstant)
    assert conv.value.count(body.value) == 2
    first = conv.value.index(body.value)
    at = conv.to_file(conv.index.position(first + 1))
    assert at == body.to_file(body.index.position(1))
    back = conv.from_file(at)
    assert back is not None and conv.index.offset(back) == first + 1


def test_a_join_kls_cannot_read_says_why() -> None:
    text = 'A = "x"\nT = TritonTemplate(name="t", source=A + helper())\n'
    found = python_constants(text).constants["t"]
    assert isinstance(found, PyProblem)
    assert "joined with + from a part" in found.message and found.line == 1


# -- rendered by Inductor ----------------------------------------------------------------------


@needs_torch
@needs_torch_source
@pytest.mark.parametrize("template", sorted(INSTANCES))
def test_each_template_renders_for_its_instance_and_checks_clean(template: str) -> None:
    name = INSTANCES[template]
    instances = load_instances(SHIPPED)
    spec = instances.instances[name]
    rendered = render_isolated(spec)
    assert rendered.text is not None, [f.message for f in rendered.findings]
    assert f"def triton_{template}(" in rendered.text  # Inductor's kernel for that template
    assert rendered.source_map is not None
    assert all(o is not None for o in rendered.source_map.origins)
    checked = check_file(spec.template, instances=instances, only={name})
    assert [f.format_line() for f in checked.findings if f.severity <= Severity.WARNING] == []


@needs_torch
@needs_torch_source
def test_an_inline_templates_lines_map_into_its_python_file() -> None:
    """conv2d's render, mapped to conv.py: the shared loop body's lines to the constant that
    holds them, the branch that rendered (not the unrolled one) to its own lines."""
    spec = load_instances(SHIPPED).instances["triton_conv2d_3x3_fp16"]
    rendered = render_isolated(spec)
    assert rendered.text is not None and rendered.source_map is not None
    in_file = source_map_to_file(rendered.source_map)
    conv = TemplateRef.parse(spec.template).file
    file_lines = conv.read_text(encoding="utf-8").split("\n")
    module_lines = rendered.text.split("\n")
    for needle in (
        "idx_x_h = i - PADDING_H + idx_y_h * STRIDE_H",
        "# Could be simplified, but slightly slower:",
        "mask_w = (idx_x_c[:, None] < GROUP_IN_C)",
    ):
        line = next(i for i, t in enumerate(module_lines) if needle in t)
        origin = in_file.origin(line)
        assert origin is not None and Path(origin.path) == conv
        assert needle in file_lines[origin.line], (needle, origin.line + 1)
    body_start = next(i for i, t in enumerate(file_lines) if t.startswith("LOOP_BODY_2D ="))
    line = next(i for i, t in enumerate(module_lines) if "matrix_x = tl.load(x_ptrs" in t)
    origin = in_file.origin(line)
    assert origin is not None and body_start < origin.line < body_start + 30


# A template of kls's own shape: def_kernel in two branches, then lines that are one span each.
BRANCHED = """{% if SCALED %}
{{def_kernel("a", "b", "s")}}
{% else %}
{{def_kernel("a", "b")}}
{% endif %}
    {{ assign("N", size("b", 1)) }}
    {{ assign("K", size("a", 1)) }}
    x = 1"""
BRANCHED_RENDER = """
import triton
@triton.jit
def k(arg_a, arg_b, out_ptr0):
    a = arg_a

    K: tl.constexpr = 32
    x = 1"""


def test_a_branchs_def_kernel_and_one_span_lines_map_by_their_names() -> None:
    """The header maps to the def_kernel whose names the kernel's arguments are (the branch
    that rendered), and a line that is one call to the call naming what it assigns."""
    assert align(BRANCHED, BRANCHED_RENDER) == [3, 3, 3, 3, 5, 5, 6, 7]


@needs_torch
@needs_torch_source
def test_grouped_mm_maps_to_the_branch_that_rendered() -> None:
    spec = load_instances(SHIPPED).instances["triton_grouped_mm_moe_bf16"]
    rendered = render_isolated(spec)
    assert rendered.text is not None and rendered.source_map is not None
    template = Path(str(spec.template)).read_text(encoding="utf-8").split("\n")
    module = rendered.text.split("\n")
    for needle, written in (
        ("def triton_grouped_mm(", 'def_kernel("a_ptr", "b_ptr", "offsets_ptr")'),
        ("@triton_heuristics.template(", 'def_kernel("a_ptr", "b_ptr", "offsets_ptr")'),
        ("B_STRIDE_N: tl.constexpr", 'assign_maybe_constexpr("B_STRIDE_N"'),
    ):
        origin = rendered.source_map.origin(next(i for i, t in enumerate(module) if needle in t))
        assert origin is not None
        assert written in template[origin.line], (needle, origin.line)


@needs_torch
@needs_torch_source
def test_scaled_mm_takes_its_order_and_workspace_from_inductors_lowering(tmp_path: Path) -> None:
    """The config in reverse order and no workspace_arg: Inductor's tuned_scaled_mm still
    orders the constexpr lines and adds the TMA workspace, so the module is the shipped one."""
    shipped = SHIPPED.read_text()
    start = shipped.index("[instances.triton_scaled_mm_rowwise_fp8]")
    end = shipped.index("# fp8 scaled mm, 1x128 block scales")
    table, config = shipped[start:end].split("[instances.triton_scaled_mm_rowwise_fp8.vars]\n")
    lines = [v for v in config.strip().split("\n") if not v.startswith("workspace_arg")]
    (tmp_path / "kls.toml").write_text(
        table + "[instances.triton_scaled_mm_rowwise_fp8.vars]\n" + "\n".join(lines[::-1]) + "\n"
    )
    mine = render_isolated(
        load_instances(tmp_path / "kls.toml").instances[
            INSTANCES["scaled_mm_device_tma_epilogue_scaling"]
        ]
    )
    ours = render_isolated(load_instances(SHIPPED).instances["triton_scaled_mm_rowwise_fp8"])
    assert mine.text is not None and "ws_ptr" in mine.text
    assert mine.text == ours.text


# -- planted mistakes, in copies made here (never stored) ---------------------------------------


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_mistake_in_a_copy_of_a_jinja_file_lands_on_its_line(tmp_path: Path) -> None:
    """The epilogue-scaled mm, copied into a project with one stride unpacked from a buffer
    def_kernel never names: KT802 at that line of the copy."""
    text = _torch_file("_inductor/kernel/templates/triton_epilogue_scaled_mm.py.jinja").read_text()
    planted = text.replace('stride_bn = {{stride("B", 1)}}', 'stride_bn = {{stride("C", 1)}}', 1)
    assert planted != text
    (tmp_path / "scaled.py.jinja").write_text(planted)
    shipped = SHIPPED.read_text()
    start = shipped.index("[instances.triton_scaled_mm_rowwise_fp8]")
    end = shipped.index("# fp8 scaled mm, 1x128 block scales")
    own = shipped[start:end].replace(
        'template = "torch:_inductor/kernel/templates/triton_epilogue_scaled_mm.py.jinja"',
        'template = "scaled.py.jinja"',
    )
    (tmp_path / "kls.toml").write_text(own)
    found = [f for f in check_paths([tmp_path]).findings if f.code == "KT802"]
    assert len(found) == 1, [f.format_line() for f in found]
    assert found[0].range.start.line == planted.split("\n").index(
        '    stride_bn = {{stride("C", 1)}}'
    )
    assert "no buffer 'C'" in found[0].message


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_mistake_in_a_joined_piece_of_an_inline_template_lands_in_its_file(
    tmp_path: Path,
) -> None:
    """conv.py copied into a project with a mistake in LOOP_BODY_2D, the piece conv2d joins
    in: Inductor's render fails (a size of a buffer def_kernel never names), and the finding
    stands on the planted line of the copy, found by the registered name alone."""
    source = _torch_file("_inductor/kernel/conv.py")
    shutil.copy(source, tmp_path / "conv.py")
    text = (tmp_path / "conv.py").read_text(encoding="utf-8")
    good = "        idx_x_c = tl.arange(0, BLOCK_K) + k\n"
    bad = '        idx_x_c = tl.arange(0, BLOCK_K) + k + {{size("Q", 0)}}\n'
    planted = text.replace(good, bad, 1)  # the first: LOOP_BODY_2D, above both templates
    assert planted != text
    (tmp_path / "conv.py").write_text(planted, encoding="utf-8")
    shipped = SHIPPED.read_text()
    start = shipped.index("[instances.triton_conv2d_3x3_fp16]")
    end = shipped.index("# A 3x3x3 video convolution")
    own = shipped[start:end].replace("torch:_inductor/kernel/conv.py", "conv.py")
    (tmp_path / "kls.toml").write_text(own)
    found = [f for f in check_paths([tmp_path]).findings if f.severity == Severity.ERROR]
    line = planted.split("\n").index(bad.rstrip("\n"))
    assert [(f.code, f.range.start.line) for f in found] == [("KT802", line)], [
        f.format_line() for f in found
    ]
    assert Path(found[0].path).name == "conv.py" and "no buffer 'Q'" in found[0].message


# -- the ROCm and Blackwell variants: parsed and checked statically ---------------------------

ROCM_MM = {  # an MI300X-sized bf16 mm (the template Inductor uses on ROCm with Triton < 3.3)
    "tensors": {"A": [4096, 4096], "B": [4096, 4096], "out": [4096, 4096]},
    "vars": {
        "BLOCK_M": 256,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
        "GROUP_M": 8,
        "EVEN_K": True,
        "ALLOW_TF32": False,
        "USE_FAST_ACCUM": False,
        "ACC_TYPE": "tl.float32",
        "matrix_instr_nonkdim": 16,
        "waves_per_eu": 0,
        "kpack": 2,
    },
}
BLACKWELL_MM = {  # a B200 bf16 mm: 148 SMs, warp-specialised, epilogue subtiled
    "tensors": {"A": [8192, 8192], "B": [8192, 8192], "out": [8192, 8192]},
    "vars": {
        "BLOCK_M": 128,
        "BLOCK_N": 256,
        "BLOCK_K": 64,
        "GROUP_M": 8,
        "EVEN_K": True,
        "ALLOW_TF32": False,
        "USE_FAST_ACCUM": False,
        "ACC_TYPE": "tl.float32",
        "A_ROW_MAJOR": True,
        "B_ROW_MAJOR": True,
        "NUM_SMS": 148,
        "TMA_SIZE": 128,
        "TMA_EXPERIMENTAL_API": False,
        "EPILOGUE_SUBTILE": 2,
        "WARP_SPECIALIZE": True,
        "FLATTEN": True,
    },
}


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


@needs_torch_source
@pytest.mark.parametrize(
    ("file", "instance", "cc"),
    [
        ("triton_mm_rocm.py.jinja", ROCM_MM, 90),
        ("triton_blackwell_ws_persistent_device_tma_mm.py.jinja", BLACKWELL_MM, 100),
    ],
)
def test_rocm_and_blackwell_variants_parse_and_check_clean(
    tmp_path: Path, file: str, instance: dict[str, dict[str, object]], cc: int
) -> None:
    text = _torch_file(f"_inductor/kernel/templates/{file}").read_text(encoding="utf-8")
    model = parse_template(text)
    assert model.syntax_error is None
    tensors = "".join(
        f'tensors.{n} = {{ shape = {shape}, dtype = "bf16" }}\n'
        for n, shape in instance["tensors"].items()
    )
    variables = "".join(f"{k} = {_toml_value(v)}\n" for k, v in instance["vars"].items())
    (tmp_path / file).write_text(text, encoding="utf-8")
    (tmp_path / "kls.toml").write_text(
        f'[instances.variant]\nprofile = "triton"\ntemplate = "{file}"\n{tensors}'
        f"num_warps = 8\nnum_stages = 3\ndevice = {{ cc = {cc} }}\n\n"
        f"[instances.variant.vars]\n{variables}"
    )
    spec = load_instances(tmp_path / "kls.toml").instances["variant"]
    assert triton_findings(model, str(tmp_path / file), spec) == []
