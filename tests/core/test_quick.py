"""The quick tier (issue 15): clang's host-side check with a precompiled preamble, mapped home.

Unit tests need nothing; the rest need nvcc (it locates the CUDA toolkit) and clang 17+
(`apt-get install clang-19`), and use the small plain-CUDA softmax template so that a
preamble builds in seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kls.compile import CompileOptions
from kls.compile.clang import ClangUnavailable, find_clang
from kls.compile.diagnostics import CLANG, is_mappable, parse_clang
from kls.compile.preamble import BACKGROUND, PreambleStore, split, warmup
from kls.compile.quick import prepare_preamble, quick_check
from kls.instances import load_instances

HAVE_NVCC = shutil.which("nvcc") is not None


def _have_clang() -> bool:
    try:
        find_clang()
    except ClangUnavailable:
        return False
    return True


needs_tools = pytest.mark.skipif(
    not (HAVE_NVCC and _have_clang()), reason="needs nvcc and clang 17+ (apt-get install clang-19)"
)
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed")
SOFTMAX = "softmax_f32_4096x1024"


@pytest.fixture
def work(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KLS_CACHE_DIR", str(tmp_path / "cache"))
    return workspace


def plant(work: Path, file: str, old: str, new: str) -> tuple[int, int]:
    """Replace `old` by `new` in a template; the (line, column) where `new` starts."""
    path = work / file
    text = path.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    path.write_text(text)
    at = text.index(new)
    return text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)


def instance(work: Path, name: str = SOFTMAX):  # type: ignore[no-untyped-def]
    return load_instances(work / "kls.toml").instances[name]


# -- units ---------------------------------------------------------------------------------------


def test_split_keeps_every_line_number() -> None:
    text = '#include <a>\nusing T = int;\n\nextern "C" {\nint f() { return 0 +; }\n}\n'
    parts = split(text)
    assert parts is not None and parts.lines == 3
    assert parts.preamble == "#include <a>\nusing T = int;\n\n"
    assert parts.body.split("\n")[3:] == text.split("\n")[3:]
    assert parts.body.split("\n")[:3] == ["", "", ""]
    assert split("int f();\n") is None
    assert split('extern "C" int f();\n') is None  # nothing to precompile


def test_warmup_is_in_its_own_namespace() -> None:
    code = warmup('extern "C" {\nint f() { return 1; }\n}\nextern "C" int g();\n')
    assert 'extern "C"' not in code
    assert code.startswith("namespace __kls_preamble_warmup {")
    assert "namespace __kls_preamble_warmup_c {" in code


WRAPPER = "/usr/lib/llvm-19/lib/clang/19/include/__clang_cuda_runtime_wrapper.h"
CLANG_LOG = "\n".join(
    [
        "In file included from /w/kernel.cu:9:",
        "/cutlass/include/cute/int.hpp:40:3: error: static assertion failed due to requirement 'x'",
        "/cutlass/include/cute/layout.hpp:70:12: note: in instantiation of template class "
        "'cute::C<float>' requested here",
        "/w/kernel.cu:120:5: note: in instantiation of function template specialization "
        "'f<float>' requested here",
        "/w/kernel.cu:130:14: error: no member named 'can_implemnt' in 'Gemm'",
        f"{WRAPPER}:387:10: fatal error: 'texture_fetch_functions.h' file not found",
        "2 errors generated.",
    ]
)


def test_parse_clang_brings_header_errors_home_through_instantiation_notes() -> None:
    messages = parse_clang(CLANG_LOG)
    assert [(Path(m.file).name, m.line) for m in messages] == [
        ("int.hpp", 40),
        ("kernel.cu", 130),
        ("__clang_cuda_runtime_wrapper.h", 387),
    ]
    assert messages[0].sites == [("/cutlass/include/cute/layout.hpp", 70), ("/w/kernel.cu", 120)]
    assert messages[1].column == 13
    source = Path("/w/kernel.cu")
    assert [is_mappable(m, source) for m in messages] == [True, True, False]
    assert CLANG.name == "clang" and CLANG.error_code == "KT606"


def test_wrong_side_calls_are_marked_for_nvcc_to_judge() -> None:
    log = (
        "/w/kernel.cu:65:58: error: no matching constructor for initialization of 'std::vector'\n"
        "/usr/include/c++/12/bits/stl_vector.h:537:7: note: candidate constructor not viable: "
        "call to __host__ function from __global__ function\n"
        "/w/kernel.cu:70:3: error: expected expression\n"
    )
    assert [m.wrong_side for m in parse_clang(log)] == [True, False]


def test_missing_clang_says_how_to_install_it() -> None:
    with pytest.raises(ClangUnavailable, match="apt-get install clang-19"):
        find_clang("/nonexistent/clang++")


def test_preambles_are_evicted_least_recently_used_first(tmp_path: Path) -> None:
    store = PreambleStore(tmp_path, max_bytes=2500)
    for i, key in enumerate(("a" * 64, "b" * 64, "c" * 64)):
        folder = store.cache.folder(key)
        folder.mkdir(parents=True)
        (folder / "result.json").write_text("{}")
        (folder / "preamble.pch").write_bytes(b"x" * 1000)
        (folder / "used").touch()
        os.utime(folder / "used", (1000 + i, 1000 + i))
    os.utime(store.cache.folder("a" * 64) / "used", (2000, 2000))  # a was used last
    assert store.evict() == 1
    assert not store.cache.folder("b" * 64).exists()
    assert store.cache.folder("a" * 64).exists() and store.cache.folder("c" * 64).exists()


# -- with nvcc and clang -------------------------------------------------------------------------


@needs_tools
def test_quick_finds_the_entry_mistake_at_the_template_token(work: Path) -> None:
    line, col = plant(work, "softmax.cu.jinja", "*workspace_size = 0;", "*workspace_sise = 0;")
    result = quick_check(instance(work), CompileOptions())
    assert result.notice is None and not result.ok
    first = result.findings[0]
    assert (first.code, first.source, first.path) == (
        "KT606",
        "clang",
        str(work / "softmax.cu.jinja"),
    )
    assert (first.range.start.line, first.range.start.column) == (line, col + 1)
    assert first.message.startswith("quick check (clang): ")
    assert "workspace_sise" in first.message
    assert first.instance == SOFTMAX


@needs_tools
def test_quick_finds_device_code_mistakes_in_the_preamble(work: Path) -> None:
    line, _ = plant(
        work, "softmax.cu.jinja", "fmaxf(row_max, static_cast", "fmaxf(row_maxx, static_cast"
    )
    result = quick_check(instance(work), CompileOptions())
    assert [(f.code, f.range.start.line) for f in result.findings] == [("KT606", line)]
    assert "row_maxx" in result.findings[0].message


@needs_tools
def test_preamble_is_built_once_then_reused(work: Path, tmp_path: Path) -> None:
    spec = instance(work)
    assert quick_check(spec, CompileOptions()).ok
    results = list((tmp_path / "cache" / "preamble").glob("*/*/result.json"))
    assert len(results) == 1 and (results[0].parent / "preamble.pch").is_file()
    stamp = results[0].stat().st_mtime_ns
    # An edit after extern "C" keeps the preamble; the mistake is still found.
    line, _ = plant(work, "softmax.cu.jinja", "  return -1;\n  }\n}", "  return -1 +;\n  }\n}")
    result = quick_check(instance(work), CompileOptions())
    assert [f.range.start.line for f in result.findings] == [line]
    assert list((tmp_path / "cache" / "preamble").glob("*/*/result.json")) == results
    assert results[0].stat().st_mtime_ns == stamp


@needs_tools
def test_without_a_preamble_the_editor_checks_the_whole_file_and_builds_it_behind(
    work: Path, tmp_path: Path
) -> None:
    line, _ = plant(work, "softmax.cu.jinja", "*workspace_size = 0;", "*workspace_size = 0 +;")
    store = PreambleStore()
    result = quick_check(instance(work), CompileOptions(), store=store, wait_for_preamble=False)
    assert [f.range.start.line for f in result.findings] == [line]
    pending = [f for f in BACKGROUND._running.values()]
    for future in pending:
        future.result(timeout=300)
    # the plain preamble; the warm one could not be made of this entry text (it has a mistake)
    assert len(list((tmp_path / "cache" / "preamble").glob("*/*/preamble.pch"))) == 1


def _wait_for_background() -> None:
    for future in list(BACKGROUND._running.values()):
        future.result(timeout=300)


@needs_tools
def test_the_plain_preamble_first_then_the_warm_one_chained_on_it(
    work: Path, tmp_path: Path
) -> None:
    spec = instance(work)
    store = PreambleStore()
    assert prepare_preamble(spec, CompileOptions(), store=store) is not None
    _wait_for_background()
    pchs = sorted((tmp_path / "cache" / "preamble").glob("*/*/preamble.pch"))
    sources = {p.parent / "kernel.cu": (p.parent / "kernel.cu").read_text() for p in pchs}
    warm = [p for p, text in sources.items() if text.startswith("namespace __kls_preamble_warmup")]
    plain = [p for p, text in sources.items() if "#include" in text]
    assert len(pchs) == 2 and len(warm) == 1 and len(plain) == 1
    assert 'extern "C"' not in sources[warm[0]] and "#include" not in sources[warm[0]]
    assert prepare_preamble(spec, CompileOptions(), store=store) is None  # both stored
    # saves use the warm one, and still find the entry's mistakes
    line, _ = plant(work, "softmax.cu.jinja", "  return -1;\n  }\n}", "  return -1 +;\n  }\n}")
    result = quick_check(instance(work), CompileOptions(), store=store, wait_for_preamble=False)
    assert [f.range.start.line for f in result.findings] == [line]
    assert str(warm[0].parent / "preamble.pch") in result.command


@needs_tools
def test_until_the_warm_preamble_is_stored_saves_use_the_plain_one(
    work: Path, tmp_path: Path
) -> None:
    store = PreambleStore()
    assert quick_check(instance(work), CompileOptions(), store=store).ok  # the CLI: plain only
    [pch] = (tmp_path / "cache" / "preamble").glob("*/*/preamble.pch")
    line, _ = plant(work, "softmax.cu.jinja", "  return -1;\n  }\n}", "  return -1 +;\n  }\n}")
    result = quick_check(instance(work), CompileOptions(), store=store, wait_for_preamble=False)
    assert [f.range.start.line for f in result.findings] == [line]
    assert str(pch) in result.command
    _wait_for_background()  # a check with a mistake starts no warm build
    assert list((tmp_path / "cache" / "preamble").glob("*/*/preamble.pch")) == [pch]
    plant(work, "softmax.cu.jinja", "  return -1 +;\n  }\n}", "  return -1;\n  }\n}")
    result = quick_check(instance(work), CompileOptions(), store=store, wait_for_preamble=False)
    assert result.ok and str(pch) in result.command
    _wait_for_background()  # a clean one does, in the background
    assert len(list((tmp_path / "cache" / "preamble").glob("*/*/preamble.pch"))) == 2
    result = quick_check(instance(work), CompileOptions(), store=store, wait_for_preamble=False)
    assert result.ok and str(pch) not in result.command


@needs_nvcc
def test_missing_clang_is_one_notice_and_no_findings(work: Path) -> None:
    result = quick_check(instance(work), CompileOptions(clang="/nonexistent/clang++"))
    assert result.ok and result.findings == []
    assert result.notice is not None and "apt-get install clang-19" in result.notice


@needs_nvcc
def test_a_clang_that_fails_outside_the_template_is_one_notice(work: Path, tmp_path: Path) -> None:
    fake = tmp_path / "clang++"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--version*) echo "clang version 19.1.7"; exit 0;; '
        "*-print-resource-dir*) echo /nonexistent; exit 0;; esac\n"
        "echo '/usr/include/fake.h:3:1: error: unsupported construct' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    result = quick_check(instance(work), CompileOptions(clang=str(fake)))
    assert result.findings == []
    assert result.notice is not None and "cannot handle this template" in result.notice
    assert "fake.h:3: unsupported construct" in result.notice


@needs_tools
def test_cli_quick_prints_clang_first_then_nvcc_s_verdict(work: Path) -> None:
    plant(work, "softmax.cu.jinja", "*workspace_size = 0;", "*workspace_sise = 0;")
    proc = subprocess.run(
        [sys.executable, "-m", "kls.cli", "compile", str(work / "softmax.cu.jinja")]
        + ["-i", SOFTMAX, "--mode", "quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ.copy(),
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert "KT606 error: quick check (clang): use of undeclared identifier" in lines[0]
    assert any("KT601 error: nvcc:" in ln for ln in lines[1:])
    assert "quick check (clang) of softmax_f32_4096x1024: 1 error(s)" in proc.stderr
    assert "(nvcc's verdict)" in proc.stderr
