"""Findings about kls.toml lines reach `kls check` (text, JSON, exit code): an unknown op, an
input_reorder the template never passes or that does not fit; every kls.toml below a folder."""

from __future__ import annotations

import json
from pathlib import Path

from tests.core.test_cli import run

OP = "warpspecialized_cooperative_epi_tma"
TYPO = "warpspecialized_pingpng_epi_tma"


def _misspell_op(workspace: Path, instance: str) -> int:
    """Misspell the op of `instance` in the workspace's kls.toml; the op's 0-based line."""
    config = workspace / "kls.toml"
    lines = config.read_text().split("\n")
    start = lines.index(f"[instances.{instance}]")
    line = next(i for i in range(start, len(lines)) if lines[i].startswith("op = "))
    lines[line] = lines[line].replace(OP, TYPO)
    config.write_text("\n".join(lines))
    return line


def test_unknown_op_reaches_kls_check_text_and_exit_code(workspace: Path) -> None:
    line = _misspell_op(workspace, "sm90_bf16_4096")
    proc = run("check", str(workspace))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{workspace / 'kls.toml'}:{line + 1}:1: KT005 error: unknown CUTLASS op" in proc.stdout
    assert "[sm90_bf16_4096]" in proc.stdout
    assert "1 did not render" in proc.stderr


def test_unknown_op_reaches_kls_check_json(workspace: Path) -> None:
    line = _misspell_op(workspace, "sm90_bf16_4096")
    proc = run("check", "--format", "json", str(workspace))
    assert proc.returncode == 1
    found = [f for f in json.loads(proc.stdout)["findings"] if f["code"] == "KT005"]
    assert len(found) == 1, found
    assert found[0]["path"] == str(workspace / "kls.toml")
    assert found[0]["range"]["start"]["line"] == line  # JSON positions are 0-based
    assert found[0]["instance"] == "sm90_bf16_4096"


def test_an_info_note_about_kls_toml_keeps_exit_code_0(workspace: Path) -> None:
    # Without a torch source the torch-2.11 instances are skipped with a KT007 info note.
    proc = run("check", str(workspace), "--torch-source", "none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "KT007 info" in proc.stdout
