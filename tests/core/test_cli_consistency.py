"""What the CLI says around its findings: follow-up notes that are true, one JSON flag, help
that explains itself, `-i` only when needed, caches, bench honesty, progress, hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_cli import run
from tests.core.test_config_findings import ENTRY, TENSORS

GEMM_PY = '''\
HELPER = "not a template"
GEMM = r"""
{% if should_swap_xw,, %}
x
{% endif %}
"""
'''


def _config(root: Path, template: str) -> None:
    (root / "kls.toml").write_text(f'[instances.i]\ntemplate = "{template}"\n{TENSORS}')


# -- follow-up notes -----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["syntax", "missing-file", "bad-constant"])
def test_no_declares_no_instance_note_when_an_error_stopped_the_render(
    tmp_path: Path, case: str
) -> None:
    (tmp_path / "t.cu.jinja").write_text(ENTRY.replace("return 0;\n}", "{% if %}\n}", 1))
    (tmp_path / "g.py").write_text(GEMM_PY)
    template = {
        "syntax": "t.cu.jinja",
        "missing-file": "gone.cu.jinja",
        "bad-constant": "g.py::NOPE",
    }
    _config(tmp_path, template[case])
    proc = run("check", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "declares no instance" not in proc.stderr
    assert "the error(s) above stop it" in proc.stderr


def test_python_file_without_kls_toml_gets_the_static_checks_in_its_strings(
    tmp_path: Path,
) -> None:
    path = tmp_path / "file.py"
    path.write_text(GEMM_PY)
    proc = run("check", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{path}:3:21: KT101 error:" in proc.stdout  # in the file's own lines and columns
    assert 'template = "file.py::GEMM"' in proc.stderr and "add.cu.jinja" not in proc.stderr
