"""Shared fixtures: write small templates and kls.toml files into a temporary workspace."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kls.checks.run import CheckResult, check_file
from kls.findings import Finding
from kls.instances import InstanceSet, load_instances

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"

GEMM_TENSORS = """\
tensors.X = { shape = [256, 128], dtype = "bf16", layout = "row" }
tensors.W = { shape = [128, 64], dtype = "bf16", layout = "col" }
tensors.Bias = "none"
tensors.Y = { shape = [256, 64], dtype = "bf16", layout = "row" }
"""


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    def config(self, body: str) -> InstanceSet:
        path = self.write("kls.toml", body)
        return load_instances(path)

    def instance(self, template: str, extra: str = "", tensors: str = GEMM_TENSORS) -> InstanceSet:
        """One instance 'i' of `template` (text) with GEMM-like tensors X, W, Bias=None, Y."""
        self.write("t.cu.jinja", template)
        return self.config(f'[instances.i]\ntemplate = "t.cu.jinja"\n{extra}\n{tensors}')

    def check(self, template: str, extra: str = "", tensors: str = GEMM_TENSORS) -> CheckResult:
        instances = self.instance(template, extra, tensors)
        assert not instances.findings, [f.format_line() for f in instances.findings]
        return check_file(self.root / "t.cu.jinja", instances=instances)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A private copy of the shipped templates and their kls.toml, free to edit."""
    dest = tmp_path / "templates"
    shutil.copytree(TEMPLATES, dest)
    return dest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The shipped templates and kls.toml copied as a project of their own (tmp/t), without
    the checkout's .kls results: what a tune writes and `--apply` edits stays in tmp."""
    shutil.copytree(TEMPLATES, tmp_path / "t", ignore=shutil.ignore_patterns(".kls"))
    return tmp_path / "t"


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def only(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, [f.format_line() for f in findings]
    return matching[0]


Span = tuple[int, int, int, int]


def span(f: Finding) -> Span:
    r = f.range
    return (r.start.line, r.start.column, r.end.line, r.end.column)


def find_span(text: str, needle: str, occurrence: int = 0) -> Span:
    """The (line, col, line, col) range of the n-th occurrence of `needle` in `text`."""
    text = textwrap.dedent(text)
    at = -1
    for _ in range(occurrence + 1):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at)
    col = at - (text.rfind("\n", 0, at) + 1)
    end = at + len(needle)
    end_line = text.count("\n", 0, end)
    end_col = end - (text.rfind("\n", 0, end) + 1)
    return (line, col, end_line, end_col)


Finder = Callable[[str, str], Span]


def gpu_available() -> tuple[bool, str]:
    """Whether an NVIDIA GPU and driver are usable here (cuInit through cuda-python)."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        return False, f"cuda-python is not importable: {exc}"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:
        return False, f"no NVIDIA driver: {exc}"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {err}"
    err, count = driver.cuDeviceGetCount()
    return (count > 0, "ok") if err == driver.CUresult.CUDA_SUCCESS else (False, str(err))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    ok, reason = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {reason}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def torch_allowed_again() -> Iterator[None]:
    """A language server in the test process turns the torch worker off until its settings
    (kls.profiles.triton.client.allow_torch); the next test starts as the CLI does."""
    yield
    from kls.profiles.triton.client import allow_torch

    allow_torch(True)
