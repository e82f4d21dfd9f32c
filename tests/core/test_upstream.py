"""The torch-source locator: the search order, each shape of source, what it refuses."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kls.checks.run import check_paths
from kls.cli import main
from kls.findings import Severity
from kls.instances import load_instances
from kls.upstream import TorchSourceError, locate, major_minor, open_source
from kls.upstream.locate import forget, set_explicit
from tests.upstream import needs_torch_source, require_torch_source

REF = "torch:_inductor/codegen/cutlass/gemm_template.py::GEMM_TEMPLATE_CUTLASS_3X"


@pytest.fixture(autouse=True)
def fresh_search(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("KLS_TORCH_SOURCE", raising=False)
    forget()
    yield
    set_explicit(None)
    forget()


def fake_checkout(root: Path, version: str = "2.11.0a0") -> Path:
    (root / "torch" / "_inductor" / "kernel").mkdir(parents=True)
    (root / "torch" / "_inductor" / "kernel" / "mm.py").write_text("X = 'int x;'\n")
    (root / "version.txt").write_text(version + "\n")
    return root


def test_versions_compare_by_major_minor() -> None:
    assert major_minor("2.11.0+cu130") == major_minor("2.11.0a0+git1") == (2, 11)
    assert major_minor("unknown") is None


def test_a_checkout_its_package_folder_and_a_wheel(tmp_path: Path) -> None:
    checkout = fake_checkout(tmp_path / "pytorch")
    source = open_source(checkout)
    assert (source.kind, source.version) == ("checkout", "2.11.0a0")
    assert source.package == (checkout / "torch").resolve()
    wheel = tmp_path / "torch-2.11.0-cp311-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("torch/version.py", "__version__ = '2.11.0+cu130'\n")
        z.writestr("torch/_inductor/kernel/mm.py", "X = 1\n")
        z.writestr("torch/_inductor/../../escape.py", "X = 1\n")  # a name that leaves
        z.writestr("torch/lib/libtorch.so", b"\0" * 10)  # not a source kls reads
    unpacked = open_source(wheel)
    assert (unpacked.kind, unpacked.version) == ("wheel", "2.11.0+cu130")
    assert (unpacked.package / "_inductor" / "kernel" / "mm.py").read_text() == "X = 1\n"
    assert not (unpacked.package / "lib").exists()
    assert not (unpacked.package.parent.parent / "escape.py").exists()


def _small_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("torch/version.py", "__version__ = '2.11.0'\n")
        z.writestr("torch/_inductor/kernel/mm.py", "X = 'int x;'\n")
    return path


def test_a_wheel_is_unpacked_out_of_sight_then_moved_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process reading the cache sees no folder or a whole one: the unpack writes a
    folder of its own, and one rename puts it in place."""
    import kls.upstream.source as source_module

    monkeypatch.setenv("KLS_CACHE_DIR", str(tmp_path / "cache"))
    unpacked_into: list[Path] = []
    real_unpack = source_module._unpack

    def watched(wheel: Path, target: Path) -> None:
        unpacked_into.append(target)
        assert list(target.parent.glob("[!.]*")) == []  # nothing in place while it runs
        real_unpack(wheel, target)

    monkeypatch.setattr(source_module, "_unpack", watched)
    source = open_source(_small_wheel(tmp_path / "torch-2.11.0-py3-none-any.whl"))
    assert (source.package / "_inductor" / "kernel" / "mm.py").read_text() == "X = 'int x;'\n"
    [private] = unpacked_into
    assert private.name.startswith(".") and not private.exists()
    assert (source.package.parent / ".complete").is_file()


def test_an_unpack_left_incomplete_is_replaced_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder without its `.complete` mark (an unpack that was killed, or an older kls's
    unpack a second process was rewriting) is moved aside, not read or patched."""
    monkeypatch.setenv("KLS_CACHE_DIR", str(tmp_path / "cache"))
    wheel = _small_wheel(tmp_path / "torch-2.11.0-py3-none-any.whl")
    folder = open_source(wheel).package.parent
    (folder / ".complete").unlink()
    mm = folder / "torch" / "_inductor" / "kernel" / "mm.py"
    mm.chmod(0o644)
    mm.write_text("")  # what a reader saw mid-rewrite: a template with no string constants
    again = open_source(wheel)
    assert again.package.parent == folder
    assert mm.read_text() == "X = 'int x;'\n" and (folder / ".complete").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # nothing left aside


WHEEL = os.environ.get("KLS_TORCH_SOURCE", "")  # read before the fixture clears it

# One process of the race below: open the wheel after `delay` seconds, then read one of its
# templates for 1.5 s, counting the reads that miss its text.
READER = """
import sys, time
from pathlib import Path
from kls.upstream import open_source
time.sleep(float(sys.argv[2]))
source = open_source(Path(sys.argv[1]))
path = source.package / "_inductor/codegen/cutlass/gemm_template.py"
missed, end = 0, time.monotonic() + 1.5
while time.monotonic() < end:
    missed += "GEMM_TEMPLATE_CUTLASS_3X" not in path.read_text()
print(missed)
"""


@pytest.mark.slow
@pytest.mark.skipif(not WHEEL.endswith(".whl"), reason="KLS_TORCH_SOURCE names no torch wheel")
def test_processes_opening_one_wheel_at_once_never_read_a_half_written_file(
    tmp_path: Path,
) -> None:
    """Five processes (a language server, its workers) open the real wheel 0.1 s apart in an
    empty cache and read a template while the later ones unpack. Unpacked in place, the first
    reader missed the text in 5 of 6 runs (2-4 of about 50 000 reads: a file truncated by a
    second unpack); unpacked aside and renamed, never."""
    import subprocess
    import sys

    env = {**os.environ, "KLS_CACHE_DIR": str(tmp_path / "cache")}
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, WHEEL, str(delay / 10)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for delay in range(5)
    ]
    missed = [int(r.communicate(timeout=120)[0].strip() or "-1") for r in readers]
    assert missed == [0] * 5, missed


def test_reads_stay_under_inductor(tmp_path: Path) -> None:
    source = open_source(fake_checkout(tmp_path / "pytorch"))
    for bad in ("version.py", "_inductor/../../../etc/passwd", "/etc/passwd"):
        with pytest.raises(TorchSourceError):
            source.path_of(bad)


def test_search_order_and_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = fake_checkout(tmp_path / "a", "2.11.0"), fake_checkout(tmp_path / "b", "2.10.0")
    found = locate(str(b), tmp_path)  # the kls.toml key alone
    assert found.source is not None and found.source.version == "2.10.0"
    monkeypatch.setenv("KLS_TORCH_SOURCE", str(a))  # the variable wins over the key
    found = locate(str(b), tmp_path)
    assert found.source is not None and found.source.version == "2.11.0"
    set_explicit(str(b))  # the CLI flag / editor setting wins over both
    found = locate(None, tmp_path)
    assert found.source is not None and found.source.version == "2.10.0"
    set_explicit(None)
    monkeypatch.setenv("KLS_TORCH_SOURCE", "none")
    assert locate(str(b), tmp_path).source is None and locate(str(b), tmp_path).off


def test_a_named_source_that_is_none_is_reported_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLS_TORCH_SOURCE", str(tmp_path / "missing"))
    found = locate(None, tmp_path)
    assert found.source is None and "does not exist" in found.not_found_message()


def test_untrusted_config_key_is_ignored(tmp_path: Path) -> None:
    fake_checkout(tmp_path / "pytorch")
    (tmp_path / "kls.toml").write_text(
        '[torch]\nsource = "pytorch"\n\n[instances.a]\nprofile = "torch-2.11"\n'
        'template = "torch:_inductor/kernel/mm.py::X"\n'
        'tensors.X = { shape = [4], dtype = "f32" }\n'
    )
    assert load_instances(tmp_path / "kls.toml").instances["a"].torch_package is not None
    forget()
    untrusted = load_instances(tmp_path / "kls.toml", trusted=False)
    checkout = (tmp_path / "pytorch" / "torch").resolve()
    # The key is not read: no instance is served from the checkout it names (the search goes
    # on to the installed torch, if any, where this template does not exist).
    assert all(i.torch_package != checkout for i in untrusted.instances.values())
    assert "a" not in untrusted.instances
    assert {f.code for f in untrusted.findings} & {"KT007", "KT004"}


def test_shipped_templates_without_a_source_pass_with_one_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.conftest import TEMPLATES

    monkeypatch.setenv("KLS_TORCH_SOURCE", "none")
    result = check_paths([TEMPLATES])
    assert not [f for f in result.findings if f.severity <= Severity.WARNING]
    notes = [f for f in result.findings if f.code == "KT007"]
    assert len(notes) == 1 and "torch211_sm90_bf16_4096" in notes[0].message
    assert not [n for n in result.renders if n.startswith("torch211_")]


def test_kls_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout = fake_checkout(tmp_path / "pytorch", "2.10.1")
    assert main(["info", str(tmp_path), "--torch-source", str(checkout)]) == 0
    out = capsys.readouterr().out
    assert "torch source: torch 2.10.1 (checkout" in out
    assert "profile torch-2.11" in out and "(the source differs)" in out


@needs_torch_source
def test_upstream_constant_checks_clean_and_a_planted_error_lands_on_its_line(
    tmp_path: Path,
) -> None:
    """A checkout-shaped copy of the source's gemm_template.py with one mistake planted."""
    source = require_torch_source()
    rel = "_inductor/codegen/cutlass/gemm_template.py"
    copy = tmp_path / "pytorch" / "torch" / rel
    copy.parent.mkdir(parents=True)
    text = (source.package / rel).read_text()
    (tmp_path / "pytorch" / "version.txt").write_text(source.version)
    config = tmp_path / "proj" / "kls.toml"
    config.parent.mkdir()
    shipped = (Path(__file__).parents[1] / "data" / "upstream" / "kls.toml").read_text()
    config.write_text(
        f'[torch]\nsource = "{tmp_path / "pytorch"}"\n\n'
        + shipped.replace('"gemm_template.py::', f'"torch:{rel}::')
    )
    copy.write_text(text)
    clean = check_paths([config.parent])
    assert [f for f in clean.findings if f.severity == Severity.ERROR] == []
    assert len(clean.renders) == 4
    planted = text.replace("kernel.stride(X, -2)", "kernel.stride(X, 7)", 1)
    copy.write_text(planted)
    forget()
    found = check_paths([config.parent])
    [error] = {(f.code, f.path, f.range.start.line) for f in found.findings if f.code == "KT302"}
    assert error[1] == str(copy.resolve())
    assert error[2] == planted[: planted.index("kernel.stride(X, 7)")].count("\n")


def test_a_source_of_another_release_is_one_warning_naming_both(tmp_path: Path) -> None:
    fake_checkout(tmp_path / "pytorch", "2.12.0a0")
    (tmp_path / "kls.toml").write_text(
        '[torch]\nsource = "pytorch"\n\n'
        + "".join(
            f'[instances.{n}]\nprofile = "torch-2.11"\n'
            'template = "torch:_inductor/kernel/mm.py::X"\n'
            'tensors.X = { shape = [4], dtype = "f32" }\n\n'
            for n in ("a", "b")
        )
    )
    loaded = load_instances(tmp_path / "kls.toml")
    [warning] = [f for f in loaded.findings if f.code == "KT008"]
    assert warning.severity == Severity.WARNING
    assert "torch 2.12.0a0" in warning.message and "mirrors torch 2.11" in warning.message
    assert warning.range.start.line == 4  # instance a's profile line
    assert set(loaded.instances) == {"a", "b"}  # still rendered, as 2.11 would
