"""The torch source tests read Inductor's own files from (never stored in the repository).

`KLS_TORCH_SOURCE` names it (CI downloads the torch 2.11.0 wheel and sets it); without it the
tests that need upstream text are skipped with the reason, and with KLS_REQUIRE_TORCH_SOURCE=1
(CI) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

import pytest

from kls.upstream import TorchSource, TorchSourceError, open_source

DATA = Path(__file__).resolve().parent / "data" / "upstream"
GEMM_TEMPLATE = "_inductor/codegen/cutlass/gemm_template.py"
REASON = (
    "needs a torch source: set KLS_TORCH_SOURCE to a torch 2.11 wheel (pip download "
    "torch==2.11.0 --no-deps), checkout or torch/ folder"
)


@cache
def torch_source() -> TorchSource | None:
    named = os.environ.get("KLS_TORCH_SOURCE")
    if not named or named == "none":
        return None
    try:
        return open_source(Path(named))
    except TorchSourceError:
        return None


def required() -> bool:
    return os.environ.get("KLS_REQUIRE_TORCH_SOURCE") == "1"


needs_torch_source = pytest.mark.skipif(torch_source() is None and not required(), reason=REASON)


def require_torch_source() -> TorchSource:
    source = torch_source()
    if source is None:
        pytest.fail(REASON) if required() else pytest.skip(REASON)
    assert source is not None
    return source


@cache
def gemm_project() -> Path:
    """A folder with a copy of the source's gemm_template.py (made now, never stored) and
    kls's own kls.toml of instances of its templates."""
    folder = Path(tempfile.mkdtemp(prefix="kls-upstream-"))
    source = torch_source()
    if source is not None:
        shutil.copy(source.package / GEMM_TEMPLATE, folder / "gemm_template.py")
        (folder / "gemm_template.py").chmod(0o644)
    shutil.copy(DATA / "kls.toml", folder / "kls.toml")
    return folder


def torch_importable() -> bool:
    """torch and triton importable by kls's torch worker (or KLS_TORCH_PYTHON names one)."""
    if os.environ.get("KLS_TORCH_PYTHON"):
        return True
    return (
        importlib.util.find_spec("torch") is not None
        and importlib.util.find_spec("triton") is not None
    )


needs_torch = pytest.mark.skipif(
    not torch_importable() and os.environ.get("KLS_REQUIRE_TORCH") != "1",
    reason="needs torch 2.11 and triton importable by kls (pip install torch==2.11.0), or "
    "KLS_TORCH_PYTHON",
)
