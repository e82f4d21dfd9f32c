"""torch 2.11's own CUTLASS 3.x template compiles here too: its header includes CUTLASS's
device tensor-fill utilities, which need cuRAND headers a trimmed CUDA toolkit lacks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kls.compile import CompileOptions, compile_instance
from kls.compile.toolchain import _missing_headers
from kls.instances import load_instances
from tests.conftest import TEMPLATES


def test_curand_headers_are_supplied_only_when_the_toolkit_lacks_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLS_CACHE_DIR", str(tmp_path / "cache"))
    trimmed = tmp_path / "cuda-trimmed"
    (trimmed / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    folder = _missing_headers(trimmed)
    assert folder is not None
    names = sorted(p.name for p in folder.iterdir())
    assert "curand_kernel.h" in names
    assert all(n.startswith("curand") for n in names)  # nothing that could shadow the toolkit
    full = tmp_path / "cuda-full"
    (full / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    (full / "targets" / "x86_64-linux" / "include" / "curand_kernel.h").write_text("")
    assert _missing_headers(full) is None
    assert _missing_headers(None) is None


def test_curand_links_are_made_safely_by_many_threads_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("KLS_CACHE_DIR", str(tmp_path / "cache"))
    trimmed = tmp_path / "cuda-trimmed"
    (trimmed / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    with ThreadPoolExecutor(8) as pool:
        folders = list(pool.map(lambda _: _missing_headers(trimmed), range(32)))
    assert len(set(folders)) == 1 and folders[0] is not None
    assert (folders[0] / "curand_kernel.h").resolve().is_file()


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_torch211_bias_instance_passes_an_nvcc_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLS_CACHE_DIR", str(tmp_path / "cache"))
    spec = load_instances(TEMPLATES / "kls.toml").instances["torch211_sm90_bf16_4096_bias"]
    result = compile_instance(spec, CompileOptions(mode="check"))
    assert result.ok, [f.message for f in result.findings]
