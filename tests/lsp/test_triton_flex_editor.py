"""A flex attention template in the editor: an unsaved edit to one of its parts (here
common.py.jinja, which the instance does not name) re-renders the instance, and the rendered
module's Python error is a diagnostic on that part's line. Needs torch 2.11 and the torch
source (skips without them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.lsp.harness import Harness
from tests.upstream import needs_torch, needs_torch_source, require_torch_source

PARTS = ("flex_attention", "utilities", "common")
CONFIG = """[instances.flex_causal]
profile = "triton"
template = "flex_attention.py.jinja"
mask_mod = "mods.py:causal"
tensors.q = { shape = [2, 8, 1024, 64], dtype = "bf16" }
tensors.k = { shape = [2, 8, 1024, 64], dtype = "bf16" }
tensors.v = { shape = [2, 8, 1024, 64], dtype = "bf16" }
num_warps = 4
num_stages = 2
vars = { BLOCK_M = 64, BLOCK_N = 64 }
"""


def _flex_project(tmp_path: Path) -> None:
    """The forward's three parts copied from the torch source (made here, never stored), a
    causal mask and the instance."""
    folder = require_torch_source().package / "_inductor/kernel/flex/templates"
    for name in PARTS:
        text = (folder / f"{name}.py.jinja").read_text(encoding="utf-8")
        (tmp_path / f"{name}.py.jinja").write_text(text, encoding="utf-8")
    (tmp_path / "mods.py").write_text(
        "def causal(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n"
    )
    (tmp_path / "kls.toml").write_text(CONFIG)


@needs_torch
@needs_torch_source
@pytest.mark.slow
async def test_an_unsaved_edit_to_a_part_is_diagnosed_on_its_line(tmp_path: Path) -> None:
    _flex_project(tmp_path)
    common = tmp_path / "common.py.jinja"
    edited = common.read_text().replace("def forward_inner(", "def forward_inner(:", 1)
    line = edited.split("\n").index(next(t for t in edited.split("\n") if "forward_inner(:" in t))
    harness = Harness()
    harness.settings = {"workspaceTrusted": True, "compileOnSave": False}
    await harness.initialize()
    try:
        uri = harness.open(common.as_uri(), edited, language_id="python-jinja")
        found = await harness.wait_diagnostics(
            uri, where=lambda ds: any(d.get("code") == "KT851" for d in ds), timeout=240
        )
        [syntax] = [d for d in found if d.get("code") == "KT851"]
        assert syntax["range"]["start"]["line"] == line
        assert "flex_causal" in syntax["message"] or "flex_causal" in str(syntax.get("data", ""))
    finally:
        await harness.close()


@needs_torch_source
async def test_hover_on_a_flex_buffer_names_its_tensor_or_says_inductor_makes_it(
    tmp_path: Path,
) -> None:
    """Untrusted (the static layer only): def_kernel's Q is kls.toml's q; LSE is a buffer
    Inductor's lowering makes, with the shape it makes."""
    _flex_project(tmp_path)
    path = tmp_path / "flex_attention.py.jinja"
    text = path.read_text()
    lines = text.split("\n")
    harness = Harness()
    harness.settings = {"workspaceTrusted": False}
    await harness.initialize()
    try:
        uri = harness.open(path.as_uri(), text, language_id="python-jinja")

        async def hover(name: str) -> str:
            line = next(i for i, t in enumerate(lines) if "def_kernel(" in t and f'"{name}"' in t)
            column = lines[line].index(f'"{name}"') + 1
            position = {"line": line, "character": column}
            found = await harness.request(
                lsp.TEXT_DOCUMENT_HOVER, {"textDocument": {"uri": uri}, "position": position}
            )
            return str(found["contents"]["value"])

        assert "`Q` is tensor `q` of instance `flex_causal`" in await hover("Q")
        made = await hover("LSE")
        assert "`LSE` is made by Inductor's lowering for instance `flex_causal`" in made
        assert "float32[2x8x1024]" in made
    finally:
        await harness.close()
