"""A real editor: Neovim's built-in LSP client, headless, against `kls serve`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TEMPLATES

NVIM = shutil.which("nvim")

LUA = r"""
local out = {}
local client_id = vim.lsp.start_client({
  name = "kls",
  cmd = { PYTHON, "-m", "kls.cli", "serve" },
  root_dir = ROOT,
})
vim.cmd("edit " .. FILE)
local bufnr = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(bufnr, client_id)
local ok = vim.wait(30000, function() return #vim.diagnostic.get(bufnr) > 0 end, 50)
out.waited = ok
out.diagnostics = {}
for _, d in ipairs(vim.diagnostic.get(bufnr)) do
  table.insert(out.diagnostics, { lnum = d.lnum, col = d.col, end_col = d.end_col,
                                  code = d.code, message = d.message, source = d.source })
end
local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) },
                 position = { line = HOVER_LINE, character = HOVER_COL } }
local replies = vim.lsp.buf_request_sync(bufnr, "textDocument/hover", params, 20000)
out.hover = nil
for _, reply in pairs(replies or {}) do
  if reply.result and reply.result.contents then out.hover = reply.result.contents.value end
end
local f = io.open(OUT, "w")
f:write(vim.fn.json_encode(out))
f:close()
vim.lsp.stop_client(client_id)
vim.cmd("qa!")
"""


@pytest.mark.editor
@pytest.mark.skipif(NVIM is None, reason="Neovim is not installed (apt-get install neovim)")
def test_neovim_shows_planted_error_and_hover(tmp_path: Path) -> None:
    work = tmp_path / "templates"
    shutil.copytree(TEMPLATES, work)
    template = work / "softmax.cu.jinja"
    text = template.read_text().replace('names_str="X, Y")', 'names_str="X, Y, Z")')
    template.write_text(text)
    line_no = text[: text.index('"X, Y, Z"')].count("\n")
    col = text.split("\n")[line_no].index('"X, Y, Z"')
    hover_at = text.index("kernel.ptr(X)")
    hover_line = text[:hover_at].count("\n")
    hover_col = hover_at - (text.rfind("\n", 0, hover_at) + 1) + 11
    out = tmp_path / "out.json"
    script = tmp_path / "test.lua"
    values = {
        "PYTHON": json.dumps(sys.executable),
        "ROOT": json.dumps(str(work)),
        "FILE": json.dumps(str(template)),
        "OUT": json.dumps(str(out)),
        "HOVER_LINE": str(hover_line),
        "HOVER_COL": str(hover_col),
    }
    lua = LUA
    for key, value in values.items():
        lua = lua.replace(key, value)
    script.write_text(lua)
    assert NVIM is not None
    subprocess.run(
        [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {script}"],
        timeout=120,
        check=False,
        capture_output=True,
        cwd=work,
    )
    data = json.loads(out.read_text())
    assert data["waited"], data
    kt201 = [d for d in data["diagnostics"] if d["code"] == "KT201"]
    assert kt201, data["diagnostics"]
    assert (kt201[0]["lnum"], kt201[0]["col"]) == (line_no, col)
    assert kt201[0]["end_col"] == col + len('"X, Y, Z"')
    assert kt201[0]["source"] == "kls"
    assert "**X** (softmax_bf16_8192x4096): `bfloat16[8192, 4096]`" in data["hover"]
    assert "does not render" in data["hover"]
