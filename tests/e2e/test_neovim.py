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


QUICK_LUA = r"""
local out = { seen = {} }
local client_id = vim.lsp.start_client({
  name = "kls",
  cmd = { PYTHON, "-m", "kls.cli", "serve" },
  cmd_env = { KLS_CACHE_DIR = CACHE_FOLDER },
  root_dir = ROOT,
  -- Neovim 0.7 neither answers workspace/configuration nor pushes settings by itself: kls runs
  -- no tool (clang, nvcc) until it has them, so the editor config passes them at start.
  init_options = { settings = { compileOnSave = true } },
})
vim.cmd("edit " .. FILE)
local bufnr = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(bufnr, client_id)
vim.wait(30000, function() return vim.lsp.buf_is_attached(bufnr, client_id) end, 50)
vim.wait(3000, function() return false end, 100)  -- the first check (and the preamble) start
local function sources()
  local found = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    if d.source == "clang" or d.source == "nvcc" then
      found[d.source] = { lnum = d.lnum, message = d.message, code = d.code }
    end
  end
  return found
end
-- wait for the background preamble: the quick check of the save is then warm
local pch = CACHE_FOLDER .. "/preamble/*/*/preamble.pch"
local function warm()  -- plain Lua: vim.wait's callback may not call Vimscript
  local ls = io.popen("ls " .. pch .. " 2>/dev/null")
  local found = ls:read("*a")
  ls:close()
  return found ~= ""
end
out.warm = vim.wait(WARM_MS, warm, 200)
local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
for i, line in ipairs(lines) do
  lines[i] = line:gsub("%*workspace_size = 0;", "*workspace_sise = 0;")
end
vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
local saved = vim.loop.hrtime()
vim.cmd("write")
vim.wait(180000, function()
  local found = sources()
  local t = (vim.loop.hrtime() - saved) / 1e9
  for source, d in pairs(found) do
    if out.seen[source] == nil then out.seen[source] = { t = t, lnum = d.lnum, code = d.code,
                                                         message = d.message } end
  end
  out.after_nvcc = found
  return found.nvcc ~= nil
end, 20)
local f = io.open(OUT, "w")
f:write(vim.fn.json_encode(out))
f:close()
vim.lsp.stop_client(client_id)
vim.cmd("qa!")
"""


@pytest.mark.editor
@pytest.mark.skipif(NVIM is None, reason="Neovim is not installed (apt-get install neovim)")
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_neovim_shows_the_quick_check_first_then_nvcc_s_verdict(tmp_path: Path) -> None:
    from kls.compile.clang import ClangUnavailable, find_clang

    try:
        find_clang()
    except ClangUnavailable:
        pytest.skip("clang is not installed (apt-get install clang-19)")
    work = tmp_path / "templates"
    shutil.copytree(TEMPLATES, work)
    template = work / "softmax.cu.jinja"
    text = template.read_text()
    line_no = text[: text.index("*workspace_size = 0;")].count("\n")
    out = tmp_path / "out.json"
    values = {
        "PYTHON": json.dumps(sys.executable),
        "ROOT": json.dumps(str(work)),
        "FILE": json.dumps(str(template)),
        "OUT": json.dumps(str(out)),
        "CACHE_FOLDER": json.dumps(str(tmp_path / "cache")),
        "WARM_MS": "120000",
    }
    lua = QUICK_LUA
    for key, value in values.items():
        lua = lua.replace(key, value)
    script = tmp_path / "quick.lua"
    script.write_text(lua)
    assert NVIM is not None
    subprocess.run(
        [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {script}"],
        timeout=400,
        check=False,
        capture_output=True,
        cwd=work,
    )
    data = json.loads(out.read_text())
    seen = data["seen"]
    assert "clang" in seen and "nvcc" in seen, data
    assert seen["clang"]["t"] < seen["nvcc"]["t"], seen  # the quick tier shows first
    assert (seen["clang"]["lnum"], seen["clang"]["code"]) == (line_no, "KT606")
    assert seen["clang"]["message"].startswith("quick check (clang): ")
    assert (seen["nvcc"]["lnum"], seen["nvcc"]["code"]) == (line_no, "KT601")
    assert "clang" not in data["after_nvcc"], data  # nvcc's verdict replaced it
    assert data["warm"], data  # the preamble was built in the background after opening
