"""Read and validate instances from `kls.toml` or `[tool.kls]` in `pyproject.toml`.

Every problem becomes a finding on the config line that causes it; valid instances are kept even
when others are broken, so one typo does not hide the rest.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kls.dtypes import known_dtype_names, lookup_dtype
from kls.findings import Finding, Severity
from kls.instances.locate import TomlLocator
from kls.instances.schema import (
    KINDS,
    PROFILES,
    REFERENCES,
    RENAMED_PROFILES,
    InstanceSpec,
    OpFilter,
    TensorSpec,
    column_major_strides,
    contiguous_strides,
)
from kls.positions import Position, Range
from kls.suggest import did_you_mean

CONFIG_NAMES = ("kls.toml", "pyproject.toml")
INSTANCE_KEYS: dict[str, type | tuple[type, ...]] = {
    "template": str,
    "profile": str,
    "kind": str,
    "arch": (str, int),
    "kernel_name": str,
    "tensors": dict,
    "alpha": (int, float),
    "beta": (int, float),
    "input_reorder": list,
    "argument_template": str,
    "epilogue_template": str,
    "should_swap_xw": bool,
    "op": str,
    "op_filter": dict,
    "vars": dict,
    "reference": str,
}
TENSOR_KEYS = {"shape", "dtype", "stride", "layout", "offset"}
OP_FILTER_KEYS = {"contains", "arch"}
TOP_KEYS = {"instances", "defaults"}


@dataclass
class InstanceSet:
    """The instances of one config file, and the problems found reading it."""

    path: Path | None
    instances: dict[str, InstanceSpec] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def for_template(self, template: Path) -> list[InstanceSpec]:
        target = template.resolve()
        return [i for i in self.instances.values() if i.template.resolve() == target]

    def depends_on(self, path: Path) -> list[InstanceSpec]:
        """Instances whose rendering reads `path` (main template or a sub-template)."""
        target = path.resolve()
        return [
            i
            for i in self.instances.values()
            if target
            in {
                p.resolve()
                for p in (i.template, i.argument_template, i.epilogue_template)
                if p is not None
            }
        ]


def find_config(start: Path) -> Path | None:
    """The nearest kls.toml (or pyproject.toml with [tool.kls]) at or above `start`."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        for name in CONFIG_NAMES:
            candidate = folder / name
            if candidate.is_file() and (name == "kls.toml" or _has_tool_kls(candidate)):
                return candidate
    return None


def _has_tool_kls(pyproject: Path) -> bool:
    try:
        return "[tool.kls" in pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def load_instances(path: Path, text: str | None = None) -> InstanceSet:
    result = InstanceSet(path)
    try:
        text = path.read_text(encoding="utf-8") if text is None else text
    except (OSError, UnicodeDecodeError) as exc:
        result.findings.append(_finding(path, Range.of_line(0), "KT001", f"cannot read: {exc}"))
        return result
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"at line (\d+), column (\d+)", str(exc))
        line = int(where.group(1)) - 1 if where else 0
        col = int(where.group(2)) - 1 if where else 0
        rng = Range(Position(line, col), Position(line, col + 1))
        msg = f"invalid TOML: {re.sub(r' [(]at line .*', '', str(exc))}"
        result.findings.append(_finding(path, rng, "KT001", msg))
        return result
    prefix: tuple[str, ...] = ()
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("kls", {})
        prefix = ("tool", "kls")
    reader = _Reader(path, TomlLocator(text), prefix, result.findings)
    reader.read(data, result.instances)
    return result


def _finding(path: Path, rng: Range, code: str, message: str) -> Finding:
    severity = Severity.WARNING if code == "KT006" else Severity.ERROR
    return Finding(code, severity, rng, message, path=str(path))


class _Reader:
    def __init__(
        self, path: Path, locator: TomlLocator, prefix: tuple[str, ...], out: list[Finding]
    ) -> None:
        self.path = path
        self.locator = locator
        self.prefix = prefix
        self.out = out

    def error(self, keys: tuple[str, ...], code: str, message: str) -> None:
        self.out.append(_finding(self.path, self.locator.find(self.prefix + keys), code, message))

    def read(self, data: dict[str, Any], into: dict[str, InstanceSpec]) -> None:
        for key in data:
            if key not in TOP_KEYS:
                hint = did_you_mean(key, TOP_KEYS)
                self.error((key,), "KT003", f"unknown top-level key '{key}'{hint}")
        defaults = data.get("defaults", {})
        if not isinstance(defaults, dict):
            self.error(("defaults",), "KT002", "'defaults' must be a table")
            defaults = {}
        instances = data.get("instances", {})
        if not isinstance(instances, dict):
            self.error(("instances",), "KT002", "'instances' must be a table of named instances")
            return
        if not instances:
            self.error(("instances",), "KT006", "no instances declared: add [instances.NAME]")
        for name, raw in instances.items():
            if not isinstance(raw, dict):
                self.error(("instances", name), "KT002", f"instance '{name}' must be a table")
                continue
            merged = {**defaults, **raw}
            spec = self.instance(name, merged, set(raw))
            if spec is not None:
                into[name] = spec

    def instance(self, name: str, raw: dict[str, Any], own: set[str]) -> InstanceSpec | None:
        at = ("instances", name)
        ok = True

        def where(key: str) -> tuple[str, ...]:
            return at + (key,) if key in own else ("defaults", key)

        for key, value in raw.items():
            expected = INSTANCE_KEYS.get(key)
            if expected is None:
                hint = did_you_mean(key, INSTANCE_KEYS)
                self.error(where(key), "KT003", f"unknown key '{key}' in instance '{name}'{hint}")
                ok = False
            elif not isinstance(value, expected) or (
                isinstance(value, bool) and expected in ((int, float), (str, int))
            ):
                self.error(
                    where(key),
                    "KT002",
                    f"'{key}' must be {_type_words(expected)}, not {type(value).__name__}",
                )
                ok = False
        if "template" not in raw:
            self.error(at, "KT002", f"instance '{name}' needs a 'template' path")
            return None
        if not ok:
            return None
        base = self.path.parent
        template = (base / raw["template"]).resolve()
        if not template.is_file():
            self.error(where("template"), "KT004", f"template file not found: {raw['template']}")
            return None
        sub: dict[str, Path | None] = {}
        for key in ("argument_template", "epilogue_template"):
            sub[key] = None
            if key in raw:
                candidate = (base / raw[key]).resolve()
                if not candidate.is_file():
                    self.error(where(key), "KT004", f"{key} not found: {raw[key]}")
                    return None
                sub[key] = candidate
        checks: list[Callable[[], bool]] = [
            lambda: self.profile(where("profile"), raw.get("profile", PROFILES[0])),
            lambda: self.choice(where("kind"), raw.get("kind", _default_kind(raw)), KINDS),
            lambda: self.reorder(where("input_reorder"), raw.get("input_reorder")),
            lambda: self.choice(
                where("reference"), raw.get("reference", _default_reference(raw)), REFERENCES
            ),
        ]
        if not all([check() for check in checks]):
            return None
        tensors = self.tensors(at + ("tensors",), raw.get("tensors", {}))
        if tensors is None:
            return None
        op_filter = self.op_filter(where("op_filter"), raw.get("op_filter"))
        if "op_filter" in raw and op_filter is None:
            return None
        reorder = raw.get("input_reorder")
        return InstanceSpec(
            name=name,
            template=template,
            config_path=self.path,
            profile=RENAMED_PROFILES.get(raw.get("profile", ""), raw.get("profile", PROFILES[0])),
            kind=raw.get("kind", _default_kind(raw)),
            arch=str(raw.get("arch", "90a")),
            kernel_name=raw.get("kernel_name", f"kls_{_c_ident(name)}"),
            tensors=tensors,
            alpha=float(raw.get("alpha", 1.0)),
            beta=float(raw.get("beta", 0.0)),
            input_reorder=tuple(reorder) if reorder is not None else None,
            argument_template=sub["argument_template"],
            epilogue_template=sub["epilogue_template"],
            should_swap_xw=bool(raw.get("should_swap_xw", False)),
            op=raw.get("op"),
            op_filter=op_filter,
            variables=dict(raw.get("vars", {})),
            reference=raw.get("reference", _default_reference(raw)),
            line=self.locator.find(self.prefix + at).start.line,
            op_line=self.locator.find(
                self.prefix + where("op" if "op" in raw else "op_filter")
            ).start.line,
        )

    def choice(self, keys: tuple[str, ...], value: str, allowed: tuple[str, ...]) -> bool:
        if value in allowed:
            return True
        options = ", ".join(allowed)
        hint = did_you_mean(value, allowed)
        self.error(keys, "KT002", f"'{keys[-1]}' is '{value}'{hint}; expected one of {options}")
        return False

    def profile(self, keys: tuple[str, ...], value: str) -> bool:
        new = RENAMED_PROFILES.get(value)
        if new is None:
            return self.choice(keys, value, PROFILES)
        rng = self.locator.find(self.prefix + keys)
        message = f"profile '{value}' is now '{new}' (mirrored from that release); write '{new}'"
        self.out.append(Finding("KT002", Severity.WARNING, rng, message, path=str(self.path)))
        return True

    def reorder(self, keys: tuple[str, ...], value: list[Any] | None) -> bool:
        if value is None or all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return True
        self.error(keys, "KT002", "'input_reorder' must be a list of integers, e.g. [2, 0, 1]")
        return False

    def tensors(
        self, at: tuple[str, ...], raw: dict[str, Any]
    ) -> dict[str, TensorSpec | None] | None:
        out: dict[str, TensorSpec | None] = {}
        ok = True
        for tname, value in raw.items():
            if value == "none" or value is False:
                out[tname] = None
                continue
            if not isinstance(value, dict):
                self.error(
                    at + (tname,),
                    "KT002",
                    f"tensor '{tname}' must be a table {{ shape = [...], dtype = \"bf16\" }} "
                    'or "none"',
                )
                ok = False
                continue
            spec = self.tensor(at + (tname,), tname, value)
            ok = ok and spec is not None
            out[tname] = spec
        return out if ok else None

    def tensor(self, at: tuple[str, ...], name: str, raw: dict[str, Any]) -> TensorSpec | None:
        for key in raw:
            if key not in TENSOR_KEYS:
                hint = did_you_mean(key, TENSOR_KEYS)
                self.error(at + (key,), "KT003", f"unknown key '{key}' in tensor '{name}'{hint}")
                return None
        shape: list[int] = raw.get("shape") or []
        if not _int_list(raw.get("shape")) or any(s < 0 for s in shape):
            self.error(
                at + ("shape",), "KT002", f"tensor '{name}' needs 'shape', non-negative ints"
            )
            return None
        dtype_name = raw.get("dtype")
        dtype = lookup_dtype(dtype_name) if isinstance(dtype_name, str) else None
        if dtype is None:
            hint = did_you_mean(str(dtype_name), known_dtype_names())
            self.error(
                at + ("dtype",),
                "KT002",
                f"tensor '{name}' has unknown dtype '{dtype_name}'{hint}",
            )
            return None
        stride = self.stride(at, name, tuple(shape), raw)
        if stride is None:
            return None
        offset = raw.get("offset", 0)
        if not isinstance(offset, int) or offset < 0:
            self.error(at + ("offset",), "KT002", "'offset' must be a non-negative integer")
            return None
        return TensorSpec(name, tuple(shape), dtype, stride, offset)

    def stride(
        self, at: tuple[str, ...], name: str, shape: tuple[int, ...], raw: dict[str, Any]
    ) -> tuple[int, ...] | None:
        if "stride" in raw and "layout" in raw:
            self.error(at + ("layout",), "KT002", "give either 'stride' or 'layout', not both")
            return None
        if "stride" in raw:
            stride = raw["stride"]
            if not _int_list(stride) or len(stride) != len(shape):
                self.error(
                    at + ("stride",),
                    "KT002",
                    f"tensor '{name}': 'stride' must be {len(shape)} integers like its shape",
                )
                return None
            return tuple(stride)
        layout = raw.get("layout", "row")
        if layout in ("row", "contiguous"):
            return contiguous_strides(shape)
        if layout in ("col", "column"):
            return column_major_strides(shape)
        hint = did_you_mean(str(layout), ("row", "col"))
        self.error(at + ("layout",), "KT002", f"layout '{layout}'{hint}: use 'row' or 'col'")
        return None

    def op_filter(self, at: tuple[str, ...], raw: dict[str, Any] | None) -> OpFilter | None:
        if raw is None:
            return None
        for key in raw:
            if key not in OP_FILTER_KEYS:
                hint = did_you_mean(key, OP_FILTER_KEYS)
                self.error(at + (key,), "KT003", f"unknown key '{key}' in op_filter{hint}")
                return None
        contains = raw.get("contains", [])
        if isinstance(contains, str):
            contains = [contains]
        if not isinstance(contains, list) or not all(isinstance(c, str) for c in contains):
            self.error(at + ("contains",), "KT002", "'contains' must be a list of strings")
            return None
        arch = raw.get("arch")
        return OpFilter(tuple(contains), str(arch) if arch is not None else None)


def _default_kind(raw: dict[str, Any]) -> str:
    return "cutlass_gemm" if ("op" in raw or "op_filter" in raw) else "cuda"


def _default_reference(raw: dict[str, Any]) -> str:
    return "gemm" if _default_kind(raw) == "cutlass_gemm" else "none"


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )


def _type_words(expected: Any) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    names |= {list: "a list", dict: "a table"}
    if isinstance(expected, tuple):
        return " or ".join(names[t] for t in expected)
    return names[expected]


def _c_ident(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
