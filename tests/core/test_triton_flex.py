"""Flex attention instances: forward, decode and backward rendered by Inductor's own lowering
of the flex op in the torch worker (mods from the project, trusted only), every line mapped to
the part of the three-file template it came from, and mistakes landing on that part's line.
The torch-backed tests need torch 2.11 importable by kls (or KLS_TORCH_PYTHON) and the torch
source; without them they skip (KLS_REQUIRE_TORCH=1 makes that a failure, as CI does)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kls.checks.run import check_paths
from kls.findings import Severity
from kls.instances import load_instances
from kls.profiles.triton.client import allow_torch
from kls.profiles.triton.flex_parts import FLEX_PARTS, concatenation, flex_op
from kls.render import RenderResult
from kls.sandbox.workers import render_isolated
from tests.upstream import needs_torch, needs_torch_source, require_torch_source

FLEX_DIR = "_inductor/kernel/flex/templates"
FIRST_FILE = {op: parts[0] + ".py.jinja" for op, parts in FLEX_PARTS.items()}
VARS = {
    "flex_attention": ("vars = { BLOCK_M = 128, BLOCK_N = 64 }", 8, 3),
    "flex_decoding": ("vars = { BLOCK_N = 64 }", 2, 1),
    "flex_attention_backward": (
        "vars = { BLOCK_M1 = 64, BLOCK_N1 = 128, BLOCK_M2 = 128, BLOCK_N2 = 64 }",
        8,
        3,
    ),
}
# kls's own mask, and a marker file written when the mods file is imported.
MODS = """from pathlib import Path

Path(__file__).with_name("imported").write_text("yes")


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
"""


def _instance(op: str, template: str, mask: bool, sq: int = 4096) -> str:
    variables, warps, stages = VARS[op]
    shape_q = [4, 16, 1 if op == "flex_decoding" else sq, 128]
    lines = [
        f"[instances.{op}]",
        'profile = "triton"',
        f'template = "{template}"',
        *(['mask_mod = "mods.py:causal"'] if mask else []),
        f'tensors.q = {{ shape = {shape_q}, dtype = "bf16" }}',
        f'tensors.k = {{ shape = [4, 16, {sq}, 128], dtype = "bf16" }}',
        f'tensors.v = {{ shape = [4, 16, {sq}, 128], dtype = "bf16" }}',
        f"num_warps = {warps}",
        f"num_stages = {stages}",
        variables,
    ]
    return "\n".join(lines) + "\n"


def _project(tmp_path: Path, op: str, mask: bool, template: str | None = None) -> Path:
    (tmp_path / "mods.py").write_text(MODS)
    config = tmp_path / "kls.toml"
    config.write_text(_instance(op, template or f"torch:{FLEX_DIR}/{FIRST_FILE[op]}", mask))
    return config


def _copy_parts(tmp_path: Path, op: str, plant: tuple[str, str, str] | None = None) -> None:
    """The op's template files copied into the project (made here, never stored), with one
    text replaced in one of them."""
    folder = require_torch_source().package / FLEX_DIR
    for name in FLEX_PARTS[op]:
        text = (folder / f"{name}.py.jinja").read_text(encoding="utf-8")
        if plant is not None and plant[0] == name:
            assert plant[1] in text
            text = text.replace(plant[1], plant[2], 1)
        (tmp_path / f"{name}.py.jinja").write_text(text, encoding="utf-8")


@needs_torch_source
def test_the_three_parts_map_back_line_for_line(tmp_path: Path) -> None:
    spec = load_instances(_project(tmp_path, "flex_attention", True)).instances["flex_attention"]
    assert flex_op(spec) == "flex_attention"
    joined = concatenation(spec, "flex_attention", {})
    assert [Path(p).name for p in joined.paths] == [
        "flex_attention.py.jinja",
        "utilities.py.jinja",
        "common.py.jinja",
    ]
    texts = {p: Path(p).read_text(encoding="utf-8").split("\n") for p in joined.paths}
    for line, text in enumerate(joined.text.split("\n")[:-1]):
        path, at = joined.origin(line)
        assert texts[path][at] == text, (line, path, at)
        assert joined.line_of(path, at) == line


@needs_torch_source
@pytest.mark.parametrize("op", sorted(FLEX_PARTS))
def test_a_flex_instance_checks_clean_statically(tmp_path: Path, op: str) -> None:
    """q, k and v are all a flex instance declares: the static checks see the buffers
    Inductor's lowering makes (no KT803 arity, no KT808 for USE_TMA)."""
    allow_torch(False, "static checks only in this test")
    try:
        found = check_paths([_project(tmp_path, op, op != "flex_decoding").parent]).findings
    finally:
        allow_torch(True)
    assert [f.format_line() for f in found if f.severity <= Severity.WARNING] == []
    assert not (tmp_path / "imported").exists()


def test_a_mod_reference_is_checked_when_kls_toml_is_read(tmp_path: Path) -> None:
    config = tmp_path / "kls.toml"
    (tmp_path / "flex_attention.py.jinja").write_text("{{def_kernel()}}\n")
    text = _instance("flex_attention", "flex_attention.py.jinja", True)
    config.write_text(text.replace("mods.py:causal", "mods.causal"))
    loaded = load_instances(config)
    assert "flex_attention" not in loaded.instances
    [bad] = [f for f in loaded.findings if f.code == "KT002"]
    assert "mask_mod" in bad.message and '"file.py:function"' in bad.message
    config.write_text(text)  # the file does not exist
    [missing] = [f for f in load_instances(config).findings if f.code == "KT004"]
    assert "mods.py" in missing.message


def test_an_untrusted_context_does_not_import_the_mods(tmp_path: Path) -> None:
    """No torch worker where torch is not allowed (an untrusted workspace, a server before
    its settings): the mods file is never imported; one KT800 note says why."""
    (tmp_path / "flex_attention.py.jinja").write_text("{{def_kernel()}}\n")
    (tmp_path / "utilities.py.jinja").write_text("\n")
    (tmp_path / "common.py.jinja").write_text("\n")
    config = _project(tmp_path, "flex_attention", True, "flex_attention.py.jinja")
    spec = load_instances(config).instances["flex_attention"]
    assert spec.mask_mod == f"{tmp_path / 'mods.py'}:causal"
    allow_torch(False, "off in an untrusted workspace")
    try:
        result = render_isolated(spec)
    finally:
        allow_torch(True)
    assert result.text is None
    [note] = result.findings
    assert (note.code, note.severity) == ("KT800", Severity.INFO) and "untrusted" in note.message
    assert not (tmp_path / "imported").exists()


def _render(tmp_path: Path, op: str, mask: bool) -> RenderResult:
    spec = load_instances(_project(tmp_path, op, mask)).instances[op]
    return render_isolated(spec)


@needs_torch
@needs_torch_source
@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(FLEX_PARTS))
@pytest.mark.parametrize("mask", [False, True], ids=["identity", "causal"])
def test_flex_renders_through_inductor_with_every_line_mapped(
    tmp_path: Path, op: str, mask: bool
) -> None:
    result = _render(tmp_path, op, mask)
    assert result.text is not None, [f.message for f in result.findings]
    assert [f for f in result.findings if f.severity <= Severity.WARNING] == []
    assert f"def triton_{op}(arg_Q, arg_K, arg_V, " in result.text
    assert result.source_map is not None
    origins = result.source_map.origins
    assert len(origins) == len(result.text.split("\n")) and all(o is not None for o in origins)
    # Every rendered line with no Jinja in its origin is that line, in its own file.
    parts = {Path(o.path).name for o in origins if o is not None}
    assert parts == {f"{n}.py.jinja" for n in FLEX_PARTS[op]}
    sources = {o.path: Path(o.path).read_text().split("\n") for o in origins if o is not None}
    for line, origin in zip(result.text.split("\n"), origins, strict=True):
        assert origin is not None
        source = sources[origin.path][origin.line]
        if "{" not in source:
            assert source.strip() == line.strip()
    # The mask_mod is the `modification` that makes the mask, in common.py.jinja (the
    # backward's copy of it in flex_backwards.py.jinja); the mods file ran only with a mask.
    masked = [i for i, t in enumerate(result.text.split("\n")) if "tmp1 >= tmp2" in t]
    assert bool(masked) == mask
    for i in masked:
        origin = origins[i]
        assert origin is not None
        assert "modification(" in sources[origin.path][origin.line]
    assert (tmp_path / "imported").exists() == mask


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_mistake_in_a_part_lands_on_its_file_and_line(tmp_path: Path) -> None:
    """A Jinja name nothing gives, in utilities.py.jinja (Inductor's UndefinedError, KT102; the
    static layer's KT808 in `kls check`), and a Python error in common.py.jinja (KT851, from the
    rendered module): each on its own file and line, not the concatenation's."""
    planted = "{{ NO_SUCH_NAME }}\ndef get_bounded_indices("
    _copy_parts(tmp_path, "flex_attention", ("utilities", "def get_bounded_indices(", planted))
    config = _project(tmp_path, "flex_attention", True, "flex_attention.py.jinja")
    utilities = (tmp_path / "utilities.py.jinja").read_text().split("\n")
    result = render_isolated(load_instances(config).instances["flex_attention"])
    [undefined] = result.findings
    assert undefined.code == "KT102" and "NO_SUCH_NAME" in undefined.message
    assert undefined.site is not None and Path(undefined.site.path).name == "utilities.py.jinja"
    assert utilities[undefined.site.line] == "{{ NO_SUCH_NAME }}"
    [checked] = [f for f in check_paths([tmp_path]).findings if f.severity == Severity.ERROR]
    assert Path(checked.path).name == "utilities.py.jinja"
    assert utilities[checked.range.start.line] == "{{ NO_SUCH_NAME }}"

    _copy_parts(tmp_path, "flex_attention", ("common", "def forward_inner(", "def forward_inner(:"))
    found = check_paths([tmp_path]).findings
    [kt851] = [f for f in found if f.code == "KT851"]
    common = (tmp_path / "common.py.jinja").read_text().split("\n")
    assert Path(kt851.path).name == "common.py.jinja"
    assert common[kt851.range.start.line].startswith("def forward_inner(:")


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_mod_that_is_not_there_is_one_finding(tmp_path: Path) -> None:
    config = _project(tmp_path, "flex_attention", True)
    config.write_text(config.read_text().replace("mods.py:causal", "mods.py:sliding_window"))
    result = render_isolated(load_instances(config).instances["flex_attention"])
    assert result.text is None
    [found] = result.findings
    assert found.code == "KT812" and "no function 'sliding_window'" in found.message
    assert found.site is not None and found.site.path == str(config)


# -- benchmarks/triton_flex_gpu.py: its parts that need no GPU --------------------------------


def _gpu_script() -> Any:
    path = Path(__file__).parents[2] / "benchmarks" / "triton_flex_gpu.py"
    spec = importlib.util.spec_from_file_location("triton_flex_gpu", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_the_gpu_comparison_normalises_only_generated_names() -> None:
    script = _gpu_script()
    one = "@t(meta={'kernel_name': 'a', 'backend_hash': 'AB12'})\n"
    one += "def triton_x(q):\n    r = triton_x\n"
    two = one.replace("'a'", "'b'").replace("AB12", "CD34").replace("triton_x", "triton_y")
    assert script.normalize(one) == script.normalize(two)
    assert script.compare(one, two)["identical"]
    changed = script.compare(one, two.replace("r = ", "s = "))
    assert not changed["identical"]
    assert changed["first_difference"].startswith("line 3, column 5: inductor '    r = KERNEL")


@needs_torch_source
def test_the_gpu_cases_are_the_shipped_instances() -> None:
    script = _gpu_script()
    forward, decode = script.load_cases()
    assert forward.op == "flex_attention" and forward.causal
    assert forward.kernel_options == {
        "BLOCK_M": 128,
        "BLOCK_N": 64,
        "num_warps": 8,
        "num_stages": 3,
        "BACKEND": "TRITON",
    }
    assert forward.flops() == 4 * 4 * 16 * 4096 * 4096 * 128 / 2
    assert decode.op == "flex_decoding" and not decode.causal
    assert decode.kernel_options["BACKEND"] == "TRITON_DECODE"
    assert decode.shapes["q"] == [4, 16, 1, 128]


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_the_sandbox_render_is_inductors_own_for_every_shipped_flex_instance(
    tmp_path: Path,
) -> None:
    """The benchmark's `cpu` mode: kls's worker (kls's sandbox, the editor's text) and the
    same lowering with Inductor's own Jinja environment and text give one module."""
    out = tmp_path / "flex.json"
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "server"), "KLS_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "triton_flex_gpu.py"), "cpu", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["op"] for r in rows] == ["flex_attention", "flex_decoding", "flex_attention_backward"]
    assert all(r["identical"] for r in rows), rows


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_score_mod_and_grouped_query_heads_render(tmp_path: Path) -> None:
    """A score_mod with arithmetic (its gradient in the backward's joint graph) and a forward
    with four key/value heads for sixteen query heads (GQA)."""
    (tmp_path / "mods.py").write_text(
        MODS + "\n\ndef relative(score, b, h, q_idx, kv_idx):\n"
        "    return score + (q_idx - kv_idx) * 0.25\n"
    )
    backward = _instance(
        "flex_attention_backward", f"torch:{FLEX_DIR}/flex_backwards.py.jinja", True
    )
    forward = _instance("flex_attention", f"torch:{FLEX_DIR}/flex_attention.py.jinja", False)
    forward = forward.replace("[4, 16, 4096, 128], dtype", "[4, 4, 4096, 128], dtype")
    forward = forward.replace("tensors.q = { shape = [4, 4,", "tensors.q = { shape = [4, 16,")
    mod = 'score_mod = "mods.py:relative"\n'
    (tmp_path / "kls.toml").write_text(
        backward.replace("num_warps", mod + "num_warps", 1)
        + "\n"
        + forward.replace("num_warps", mod + "num_warps", 1)
    )
    specs = load_instances(tmp_path / "kls.toml").instances
    assert specs["flex_attention"].tensors["k"].shape == (4, 4, 4096, 128)  # type: ignore[union-attr]
    texts = {}
    for name in ("flex_attention_backward", "flex_attention"):
        result = render_isolated(specs[name])
        assert result.text is not None, [f.message for f in result.findings]
        texts[name] = result.text
        assert "tl.full([1], 0.25, tl.float32)" in result.text
    assert "GQA_SHARED_HEADS : tl.constexpr = 4" in texts["flex_attention"]


@needs_torch
@pytest.mark.slow
def test_the_gpu_comparison_launches_kls_module_with_inductors_request(tmp_path: Path) -> None:
    """The parts of the bitwise check that need no GPU: the inputs made from a benchmark
    request's metas (the block mask's own values where the shapes agree), the request with
    kls's module and kernel name swapped in, and bit-for-bit equality with NaN."""
    import torch
    from torch._inductor.autotune_process import TensorMeta

    script = _gpu_script()
    cpu = torch.device("cpu")
    metas = [
        TensorMeta(cpu, torch.bfloat16, (2, 3), (1, 2), 0),
        TensorMeta(cpu, torch.int32, (1, 1, 2), (2, 2, 1), 0),
        TensorMeta(cpu, torch.int32, (1, 1, 4), (4, 4, 1), 0),
    ]
    blocks = torch.tensor([[[3, 5]]], dtype=torch.int32)
    made = script.buffers(torch, metas, [blocks, None], device="cpu")
    assert made[0].stride() == (1, 2) and made[0].abs().sum() > 0
    assert torch.equal(made[1], blocks) and not made[2].any()
    nan = torch.full((2,), float("nan"))
    assert script.same_bits(torch, nan, nan.clone())
    assert not script.same_bits(torch, nan, -nan)
    assert not torch.equal(nan, nan.clone())  # why the bits are compared

    class Request:
        module_path = "inductor.py"
        module_cache_key = "key"
        kernel_name = "triton_x"

    swapped = script.with_module(
        Request(), "@triton.jit\ndef triton_flex_attention(a):\n    pass\n"
    )
    assert swapped.kernel_name == "triton_flex_attention" and Request.kernel_name == "triton_x"
    assert Path(swapped.module_path).read_text().startswith("@triton.jit")


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_a_compile_error_in_a_helper_lands_on_its_part(tmp_path: Path) -> None:
    """Triton's compile fails inside forward_inner (common.py.jinja), a jit function of its own
    called from the kernel: the finding is on that statement's line of common.py.jinja with
    Triton's reason, not on the kernel's call of forward_inner."""
    from kls.compile import CompileOptions, compile_instance

    anchor = "    RCP_LN2: tl.constexpr = 1.44269504\n"
    planted = anchor + "    bogus = tl.no_such_function(1)\n"
    _copy_parts(tmp_path, "flex_attention", ("common", anchor, planted))
    config = _project(tmp_path, "flex_attention", True, "flex_attention.py.jinja")
    result = compile_instance(load_instances(config).instances["flex_attention"], CompileOptions())
    [failed] = [f for f in result.findings if f.code == "KT861"]
    common = (tmp_path / "common.py.jinja").read_text().split("\n")
    assert Path(failed.path).name == "common.py.jinja"
    assert common[failed.range.start.line] == "    bogus = tl.no_such_function(1)"
    assert "no_such_function" in failed.message
