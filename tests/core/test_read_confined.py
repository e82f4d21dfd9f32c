"""Templates and includes are opened first and checked after: what kls reads is the object it
checked, so a symlink swapped in between cannot be read (issue 31).

Each attack swaps a folder for a symlink out of the project at the worst moment: right after
the project-boundary check (for an include) or after kls.toml was loaded (for a template).
Before, the include's secret was rendered and the template's was read without a check.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kls.instances.roots as roots_module
from kls.input_limits import MAX_TEMPLATE_BYTES
from kls.instances import load_instances
from kls.instances.roots import TemplateOutsideProject, read_inside
from kls.render import Limits, render

SECRET = "SECRET-OUTSIDE-THE-PROJECT"
INSIDE = "// the project's own header"


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    """project/ (kls.toml, sub/) and outside/, each with a file of the same name."""
    project = tmp_path / "project"
    outside = tmp_path / "outside"
    (project / "sub").mkdir(parents=True)
    outside.mkdir()
    (project / "sub" / "x.cuh").write_text(INSIDE + "\n")
    (outside / "x.cuh").write_text(SECRET + "\n")
    (outside / "t.cu.jinja").write_text(SECRET + "\n")
    return project, outside


def _swap_for_link(folder: Path, target: Path) -> None:
    folder.rename(folder.with_name(folder.name + ".moved"))
    folder.symlink_to(target, target_is_directory=True)


def test_an_include_swapped_right_after_its_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, outside = _layout(tmp_path)
    (project / "t.cu.jinja").write_text('{% include "sub/x.cuh" %}\n')
    (project / "kls.toml").write_text('[instances.i]\nkind = "cuda"\ntemplate = "t.cu.jinja"\n')
    spec = load_instances(project / "kls.toml").instances["i"]
    real_is_inside = roots_module.is_inside
    swapped: list[Path] = []

    def check_then_swap(path: Path, roots: object) -> bool:
        inside = real_is_inside(path, roots)  # type: ignore[arg-type]
        if inside and not swapped and path.name == "x.cuh":
            _swap_for_link(project / "sub", outside)  # the attacker's move, just in time
            swapped.append(path)
        return inside

    monkeypatch.setattr(roots_module, "is_inside", check_then_swap)
    result = render(spec, None, Limits(seconds=30))
    assert swapped, "the include was never checked"
    assert SECRET not in (result.text or "")
    assert result.text is not None and INSIDE in result.text  # what was opened and checked


def test_a_template_folder_swapped_after_loading_is_refused(tmp_path: Path) -> None:
    project, outside = _layout(tmp_path)
    (project / "tpl").mkdir()
    (project / "tpl" / "t.cu.jinja").write_text("// fine\n")
    (project / "kls.toml").write_text('[instances.i]\nkind = "cuda"\ntemplate = "tpl/t.cu.jinja"\n')
    spec = load_instances(project / "kls.toml").instances["i"]
    _swap_for_link(project / "tpl", outside)
    result = render(spec, None, Limits(seconds=30))
    assert result.text is None or SECRET not in result.text
    [finding] = result.findings
    assert finding.code == "KT105" and "outside" in finding.message, finding.message
    assert "Errno" not in finding.message


def test_read_inside_refuses_what_is_not_a_plain_file_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.cuh"
    os.mkfifo(fifo)  # an open without O_NONBLOCK would wait for a writer forever
    with pytest.raises(OSError, match="not a regular file"):
        read_inside(fifo, [tmp_path], "include 'pipe.cuh'", MAX_TEMPLATE_BYTES)
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError):
        read_inside(tmp_path / "d", [tmp_path], "include 'd'", MAX_TEMPLATE_BYTES)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other.cuh"
    elsewhere.write_text(SECRET)
    try:
        (tmp_path / "link.cuh").symlink_to(elsewhere)
        with pytest.raises(TemplateOutsideProject):
            read_inside(tmp_path / "link.cuh", [tmp_path], "include 'link.cuh'", 100)
    finally:
        elsewhere.unlink()
    big = tmp_path / "big.cuh"
    big.write_bytes(b"x" * 300)
    assert len(read_inside(big, [tmp_path], "include 'big.cuh'", 100)) == 101  # the bound + 1
