"""Profiles are packages behind one interface: a third one takes one package and one
registry line, and the pipeline (load, render, check, names) reaches it only through that
interface."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kls.profiles as profiles
from kls.instances import load_instances
from kls.render import context_names, render

TOY = '''
"""A toy profile: a kernel of one fixed signature, the greeting as a context name."""
from kls.profiles.base import Profile
from kls.profiles.inductor2023.template_api import TemplateAPI
from kls.runtime.kernel import SIGNATURE_C_NAMES


class Toy(Profile):
    def reserved_c_names(self, kind):
        return SIGNATURE_C_NAMES

    def render_context(self, session, instance, result, buffers, output):
        return {**buffers, "kernel": session.kernel, "greeting": "hello",
                "template": TemplateAPI(session.recorder, session.kernel, output)}

    def finish(self, result):
        result.text = result.text.replace("hello", "hello, toy")

    def runtime_variables(self, instance):
        return ("tile",)


PROFILE = Toy(
    name="toy",
    mirrors="nothing: a test's own",
    kernel_api=frozenset({"def_kernel", "ptr"}),
    template_api={"cuda": frozenset({"header"})},
    context={"cuda": frozenset({"kernel", "template", "greeting"})},
)
'''


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    package = tmp_path / "toyprofile"
    package.mkdir()
    (package / "__init__.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = dict(profiles.PROFILES)
    profiles.register(importlib.import_module("toyprofile").PROFILE)  # the registry line
    yield
    profiles.PROFILES.clear()
    profiles.PROFILES.update(before)
    sys.modules.pop("toyprofile", None)


def _project(tmp_path: Path, profile: str) -> Path:
    (tmp_path / "k.cu.jinja").write_text(
        "// {{ greeting }}\n{{ kernel.def_kernel(inputs=[X], outputs=[Y], names_str='X, Y') }}"
        " { {{ kernel.ptr(X) }}; }\n"
    )
    tensors = (
        'tensors.X = { shape = [4], dtype = "f32" }\ntensors.Y = { shape = [4], dtype = "f32" }\n'
    )
    (tmp_path / "kls.toml").write_text(
        f'[instances.k]\ntemplate = "k.cu.jinja"\nprofile = "{profile}"\n'
        f"vars = {{ tile = 4 }}\n{tensors}"
    )
    return tmp_path / "kls.toml"


def test_a_third_profile_is_one_package_and_one_registry_line(toy: Any, tmp_path: Path) -> None:
    spec = load_instances(_project(tmp_path, "toy")).instances["k"]
    result = render(spec)
    assert result.text is not None, [f.message for f in result.findings]
    assert result.text.startswith("// hello, toy\n")  # its context, then its finishing step
    assert "greeting" in context_names(spec) and "tile" not in context_names(spec)
    assert spec.profile == "toy" and profiles.profile("toy").runtime_variables(spec) == ("tile",)


def test_an_unregistered_profile_is_a_config_error_with_the_known_names(tmp_path: Path) -> None:
    loaded = load_instances(_project(tmp_path, "toy"))
    [finding] = [f for f in loaded.findings if f.code == "KT002"]
    assert "'toy'" in finding.message and "torch-2.11" in finding.message
    assert "k" not in loaded.instances


def test_the_pipeline_never_names_a_profile() -> None:
    """Outside kls/profiles, no module compares an instance's profile with a name."""
    root = Path(profiles.__file__).resolve().parent.parent
    offenders = []
    for path in root.rglob("*.py"):
        if "profiles" in path.relative_to(root).parts:
            continue
        text = path.read_text()
        for needle in ('.profile == "', '.profile != "', 'name == "torch-2.11"'):
            if needle in text:
                offenders.append(f"{path.relative_to(root)}: {needle}")
    assert offenders == []
