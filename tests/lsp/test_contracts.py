"""The contracts between the server and the VS Code extension stay in step: the answers of
kls's commands and requests (`kls.lsp.protocol` vs `src/logic/protocol.ts`), their vocabularies
(Literal aliases vs TypeScript unions) and the settings (`Settings` vs package.json vs
`src/logic/server.ts`)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Literal, NotRequired, get_args, get_origin, get_type_hints

import pytest

from kls.lsp import protocol
from kls.lsp.settings import CLIENT_KEYS, EXTENSION_KEYS, Settings
from kls.sandbox.workers import EDITOR_MEMORY_MB_RANGE, EDITOR_SECONDS_RANGE
from tests.conftest import ROOT

EXTENSION = ROOT / "vscode-extension"
TS_PROTOCOL = (EXTENSION / "src" / "logic" / "protocol.ts").read_text()
TS_SERVER = (EXTENSION / "src" / "logic" / "server.ts").read_text()
PACKAGE = json.loads((EXTENSION / "package.json").read_text())
# Settings only the extension reads (which Python, what to install, which files, tracing).
CLIENT_ONLY = {
    "python.interpreterPath",
    "installSource",
    "files.patterns",
    "files.pythonPatterns",
    "trace.server",
}

ANSWERS = [
    protocol.PreviewAnswer,
    protocol.SelectInstanceAnswer,
    protocol.CompileAnswer,
    protocol.CancelAnswer,
    protocol.BenchmarkAnswer,
    protocol.TuneAnswer,
    protocol.AssemblyAnswer,
]
ALIASES = {
    "CompileMode": protocol.CompileMode,
    "DiagnosticSource": protocol.DiagnosticSource,
    "JobKind": protocol.JobKind,
    "InstanceKind": protocol.InstanceKind,
    "Reference": protocol.Reference,
    "AssemblyKind": protocol.AssemblyKind,
}


def ts_interface(source: str, name: str) -> dict[str, tuple[bool, str]]:
    """field -> (optional, TypeScript type) of `export interface name { ... }`."""
    match = re.search(rf"export interface {name} \{{(.*?)\n\}}", source, re.DOTALL)
    assert match, f"no interface {name}"
    fields = {}
    for line in match.group(1).splitlines():
        m = re.match(r"\s*(\w+)(\??):\s*(.+);$", line)
        if m:
            fields[m.group(1)] = (m.group(2) == "?", m.group(3))
    return fields


def ts_union(name: str) -> set[str]:
    match = re.search(rf"export type {name} = (.+);", TS_PROTOCOL)
    assert match, f"no type {name}"
    return {part.strip().strip('"') for part in match.group(1).split("|")}


def ts_type(hint: Any) -> str:
    """The TypeScript spelling of a Python annotation, as protocol.ts writes it."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is type(None):
        return "null"
    if hint in (str, bool):
        return {str: "string", bool: "boolean"}[hint]
    if hint in (int, float):
        return "number"
    if origin is list:
        return f"{ts_type(args[0])}[]"
    if origin is dict:
        return "Record<string, unknown>"
    if origin is Literal:
        names = [n for n, alias in ALIASES.items() if set(get_args(alias)) == set(args)]
        return names[0]
    if args:  # a union
        return " | ".join(ts_type(a) for a in args)
    raise AssertionError(f"no TypeScript spelling for {hint}")


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.__name__)
def test_answers_match_typescript(answer: Any) -> None:
    hints = get_type_hints(answer, include_extras=True)
    ts = ts_interface(TS_PROTOCOL, answer.__name__)
    assert set(ts) == set(hints)
    for key, hint in hints.items():
        optional = get_origin(hint) is NotRequired
        plain = get_args(hint)[0] if optional else hint
        assert ts[key] == (optional, ts_type(plain)), key


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_vocabularies_match_typescript(name: str) -> None:
    assert ts_union(name) == set(get_args(ALIASES[name]))


def test_names_match_typescript() -> None:
    for name in ("PREVIEW_REQUEST", *(n for n in dir(protocol) if n.endswith("_COMMAND"))):
        assert f'export const {name} = "{getattr(protocol, name)}";' in TS_PROTOCOL, name


def test_vocabularies_are_the_pipelines() -> None:
    from kls.instances.schema import KINDS, REFERENCES
    from kls.profiles import names

    # Profile names are the registry's: both sides keep a plain string, no hand-kept union.
    assert protocol.Profile is str and "export type Profile = string;" in TS_PROTOCOL
    assert names() == ("inductor-2023", "torch-2.11", "torch-2.11-streamk", "triton")
    assert get_args(protocol.InstanceKind) == KINDS
    assert get_args(protocol.Reference) == REFERENCES


def test_settings_match_package_json_and_the_extension() -> None:
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert set(CLIENT_KEYS) | set(EXTENSION_KEYS) == set(fields)
    properties = PACKAGE["contributes"]["configuration"]["properties"]
    server_keys = {key.removeprefix("kls.") for key in properties} - CLIENT_ONLY
    assert server_keys == set(CLIENT_KEYS.values())
    assert set(ts_interface(TS_SERVER, "KlsSettings")) == server_keys | set(EXTENSION_KEYS.values())
    listed = re.search(r"SERVER_KEYS[^=]*= \[(.*?)\];", TS_SERVER, re.DOTALL)
    assert listed and set(re.findall(r'"(\w+)"', listed.group(1))) == server_keys
    defaults = Settings()
    for name, key in CLIENT_KEYS.items():
        spec = properties[f"kls.{key}"]
        value = getattr(defaults, name)
        expected = "" if value is None else list(value) if isinstance(value, tuple) else value
        assert spec["default"] == expected, key
        kind = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array"}
        assert spec["type"] == kind[type(expected)], key


def test_setting_bounds_match() -> None:
    properties = PACKAGE["contributes"]["configuration"]["properties"]
    for key, bounds in (
        ("renderTimeout", EDITOR_SECONDS_RANGE),
        ("renderMemoryMB", EDITOR_MEMORY_MB_RANGE),
    ):
        assert (properties[f"kls.{key}"]["minimum"], properties[f"kls.{key}"]["maximum"]) == bounds
    # What the server reads from the client is what package.json offers.
    raw = {key: properties[f"kls.{key}"]["default"] for key in CLIENT_KEYS.values()}
    assert Settings.from_client(raw) == Settings()


def test_an_untrusted_workspace_cannot_set_what_runs_or_what_bounds() -> None:
    """VS Code ignores a workspace's value of these in Restricted Mode: every setting that
    names a program, a folder or a config, and the render sandbox's bounds."""
    restricted = set(PACKAGE["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"])
    must = {"python.interpreterPath", "nvccPath", "clangPath", "cutlassInclude", "extraRoots"}
    must |= {"instancesFile", "renderTimeout", "renderMemoryMB"}
    assert {f"kls.{key}" for key in must} <= restricted
