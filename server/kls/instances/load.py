"""Read and validate instances from `kls.toml` or `[tool.kls]` in `pyproject.toml`.

Every problem becomes a finding on the config line that causes it; valid instances are kept even
when others are broken, so one typo does not hide the rest.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kls.arch import arch_problem
from kls.dtypes import dtype_choices, lookup_dtype, suggest_dtype
from kls.findings import Finding, Severity
from kls.input_limits import INT64_MAX, MAX_CONFIG_BYTES, MAX_INSTANCES
from kls.instances.flex_files import flex_op, part_paths
from kls.instances.locate import TomlLocator
from kls.instances.roots import describe_roots, is_inside, project_roots
from kls.instances.schema import (
    DEFAULT_PROFILE,
    KINDS,
    REFERENCES,
    RENAMED_PROFILES,
    UNSET_REFERENCE,
    InstanceSpec,
    OpFilter,
    TensorSpec,
    column_major_strides,
    contiguous_strides,
)
from kls.instances.tune_table import TuneSpaceError, level_problem, parse_space
from kls.positions import Position, Range
from kls.suggest import did_you_mean
from kls.template.pysource import python_constants
from kls.template.source import (
    SEPARATOR,
    SourceError,
    TemplateRef,
    constant_in,
    is_python_file,
    read_file_text,
)
from kls.upstream import Located, TorchSourceError, locate, major_minor
from kls.upstream.refs import TORCH_PREFIX, is_torch_ref

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
    "cutlass_instantiation_level": (str, int),
    "vars": dict,
    "reference": str,
    "tolerance": (int, float),
    "tune": dict,  # the tune space of `kls tune` (kls.tune.space reads and checks it)
    # Triton templates (profile "triton"): the launch, the device model, Inductor's template.
    "num_warps": int,
    "num_stages": int,
    "device": dict,
    "inductor_template": str,
    "score_mod": str,  # flex attention's mods, "file.py:function"
    "mask_mod": str,
}
DEVICE_KEYS = {
    "name",
    "cc",
    "sm_count",
    "regs_per_sm",
    "threads_per_sm",
    "warp_size",
    "shared_memory_per_block",
    "shared_memory_per_sm",
    "l2_bytes",
    "memory_bytes",
}
TENSOR_KEYS = {"shape", "dtype", "stride", "layout", "offset"}
OP_FILTER_KEYS = {"contains", "arch"}
TOP_KEYS = {"instances", "defaults", "torch"}
TORCH_KEYS = {"source"}
TEMPLATE_KEYS = ("template", "argument_template", "epilogue_template")
MOD_KEYS = ("score_mod", "mask_mod")
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# C and C++ keywords a kernel name must not be (CUDA C++ is compiled as C++).
_CPP_KEYWORD_TEXT = (
    "alignas alignof asm auto bool break case catch char char8_t char16_t char32_t class "
    "concept const consteval constexpr constinit const_cast continue co_await co_return "
    "co_yield decltype default delete do double dynamic_cast else enum explicit export "
    "extern false float for friend goto if inline int long mutable namespace new noexcept "
    "nullptr operator private protected public register reinterpret_cast requires return "
    "short signed sizeof static static_assert static_cast struct switch template this "
    "thread_local throw true try typedef typeid typename union unsigned using virtual void "
    "volatile wchar_t while"
)
CPP_KEYWORDS = frozenset(_CPP_KEYWORD_TEXT.split())


@dataclass
class InstanceSet:
    """The instances of one config file, and the problems found reading it."""

    path: Path | None
    instances: dict[str, InstanceSpec] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    # Every instance name the file declares, usable or not (a missing template drops an
    # instance from `instances`, with a finding).
    declared: set[str] = field(default_factory=set)
    _resolved: dict[str, tuple[TemplateRef, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def depends_on(self, path: Path) -> list[InstanceSpec]:
        """Instances whose rendering reads `path` (main template or a sub-template; for a
        Python file, any of its constants)."""
        want = TemplateRef.parse(path).resolve()
        return [i for i in self.instances.values() if _holds(want, self._sources(i))]

    def _sources(self, instance: InstanceSpec) -> tuple[TemplateRef, ...]:
        """The instance's template sources, resolved once per loaded config (resolving paths
        on every check cost ~3 ms an edit in the language server)."""
        cached = self._resolved.get(instance.name)
        if cached is None:
            paths = (instance.template, instance.argument_template, instance.epilogue_template)
            op = flex_op(instance)  # a flex template's other parts, read beside it
            parts = part_paths(instance, op)[1:] if op is not None else []
            cached = tuple(TemplateRef.parse(p).resolve() for p in (*paths, *parts) if p)
            self._resolved[instance.name] = cached
        return cached

    def sources_in(self, file: Path) -> list[str]:
        """The source ids (`file.py::NAME`) of the constants of Python file `file` that
        instances read, in the order instances name them."""
        target = file.resolve()
        out = {
            ref.id: None
            for i in self.instances.values()
            for ref in self._sources(i)
            if ref.constant and ref.file == target
        }
        return list(out)

    def upstream_files(self) -> list[Path]:
        """The main-template files (or `file.py::NAME` ids) that instances read from the
        torch source, in the order instances name them."""
        out: dict[Path, None] = {}
        for i in self.instances.values():
            if i.torch_package is not None and TemplateRef.parse(i.template).file.is_relative_to(
                i.torch_package
            ):
                out[TemplateRef.parse(i.template).file] = None
        return list(out)

    def python_files(self) -> list[Path]:
        """The Python files whose constants instances read as templates."""
        out = {
            ref.file: None
            for i in self.instances.values()
            for ref in self._sources(i)
            if ref.constant
        }
        return list(out)


def _holds(want: TemplateRef, sources: tuple[TemplateRef, ...]) -> bool:
    """Whether resolved `want` is, or (a whole file) holds, one of resolved `sources`."""
    return any(ref == want or (want.constant is None and ref.file == want.file) for ref in sources)


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


def _colon_hint(key: str, value: str) -> str:
    """A reference is `file.py:function` (one colon), a template constant `file.py::NAME`
    (two): say so when `value` has the other's count."""
    file, _, name = value.partition(":")
    if not file.endswith(".py"):
        return ""
    if key == "reference" and name.startswith(":") and name[1:].isidentifier():
        return f'; a reference takes one colon: "{file}:{name[1:]}" (a template two)'
    if key != "reference" and name.isidentifier():
        return f'; a template constant takes two colons: "{file}::{name}" (a reference one)'
    return ""


def is_config(path: Path) -> bool:
    """A kls.toml, or a pyproject.toml with a [tool.kls] table."""
    return path.name == "kls.toml" or (path.name == "pyproject.toml" and _has_tool_kls(path))


def _has_tool_kls(pyproject: Path) -> bool:
    try:
        with pyproject.open("rb") as f:
            head = f.read(MAX_CONFIG_BYTES)
    except OSError:
        return False
    return b"[tool.kls" in head


def load_instances(
    path: Path,
    text: str | None = None,
    extra_roots: Iterable[str | Path] = (),
    trusted: bool = True,
) -> InstanceSet:
    """The instances of the config at `path` (or of `text`, its unsaved contents). Template
    paths must lie inside the config's folder or one of `extra_roots` (KT004 otherwise), or
    be `torch:` references into the located torch source. An untrusted workspace's
    `[torch] source` key is ignored."""
    result = InstanceSet(path)
    try:
        text = _read_config(path) if text is None else text
    except (OSError, UnicodeDecodeError) as exc:
        result.findings.append(_finding(path, Range.of_line(0), "KT001", f"cannot read: {exc}"))
        return result
    except _ConfigTooLarge as exc:
        result.findings.append(_finding(path, Range.of_line(0), "KT001", str(exc)))
        return result
    if len(text) > MAX_CONFIG_BYTES:
        result.findings.append(_finding(path, Range.of_line(0), "KT001", _too_large(len(text))))
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
    reader.roots = project_roots(path, extra_roots)
    reader.trusted = trusted
    reader.read(data, result.instances)
    table = data.get("instances")
    result.declared = set(table) if isinstance(table, dict) else set()
    reader.note_skipped()
    reader.note_version(result.instances)
    return result


def registered_profiles() -> tuple[str, ...]:
    """The profile names kls knows. The registry's packages build on this layer (they read
    instances), so it is asked here when a config names a profile, not imported above."""
    from kls.profiles import names

    return names()


def torch_source_of(path: Path) -> str | None:
    """The `[torch] source` a config names (None: unset, unreadable or not a string)."""
    try:
        data = tomllib.loads(_read_config(path))
    except (OSError, UnicodeDecodeError, _ConfigTooLarge, tomllib.TOMLDecodeError):
        return None
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("kls", {})
    table = data.get("torch")
    value = table.get("source") if isinstance(table, dict) else None
    return value if isinstance(value, str) and value else None


class _ConfigTooLarge(Exception):
    pass


def _too_large(size: int) -> str:
    return (
        f"the config is {size / (1024 * 1024):.1f} MiB; kls reads configs up to "
        f"{MAX_CONFIG_BYTES // (1024 * 1024)} MiB (about 5,000 instances): split it into one "
        "kls.toml per folder of templates"
    )


def _read_config(path: Path) -> str:
    """The config's text, refusing to read more than MAX_CONFIG_BYTES."""
    with path.open("rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise _ConfigTooLarge(_too_large(max(path.stat().st_size, len(data))))
    return data.decode("utf-8")


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
        self.roots: tuple[Path, ...] = project_roots(path)
        self.trusted = True
        self.torch_value: str | None = None
        self._torch: Located | None = None
        self.skipped: list[tuple[str, tuple[str, ...]]] = []  # (instance, keys): no source

    def torch(self) -> Located:
        """The torch source for this config, located once (on first need)."""
        if self._torch is None:
            self._torch = locate(self.torch_value if self.trusted else None, self.path.parent)
        return self._torch

    def read_torch_table(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            self.error(("torch",), "KT002", '[torch] must be a table: source = "PATH"')
            return
        for key, value in raw.items():
            if key not in TORCH_KEYS:
                hint = did_you_mean(key, TORCH_KEYS)
                self.error(("torch", key), "KT003", f"unknown key '{key}' in [torch]{hint}")
            elif not isinstance(value, str) or not value:
                self.error(
                    ("torch", key),
                    "KT002",
                    "[torch] source must name a PyTorch checkout, a torch/ folder or a wheel",
                )
            else:
                self.torch_value = value

    def note_version(self, instances: dict[str, InstanceSpec]) -> None:
        """One KT008 warning when the torch source is not a release the instances' profiles
        mirror (kls then renders as the profile's release does)."""
        from kls.profiles import profile  # the registry builds on this layer: asked, not imported

        source = self.torch().source
        found = major_minor(source.version) if source is not None else None
        if source is None or found is None:
            return
        for spec in instances.values():
            mirrored = profile(spec.profile).torch_versions
            if spec.torch_package is None or not mirrored or found in mirrored:
                continue
            wanted = ", ".join(f"{a}.{b}" for a, b in mirrored)
            message = (
                f"the torch source is torch {source.version} ({source.origin}) but profile "
                f"'{spec.profile}' mirrors torch {wanted}: kls renders as torch {wanted} does, "
                "which may differ from what this torch renders; point kls at a matching torch "
                "(KLS_TORCH_SOURCE, [torch] source) or use a profile for this release"
            )
            rng = self.locator.find(self.prefix + ("instances", spec.name, "profile"))
            self.out.append(Finding("KT008", Severity.WARNING, rng, message, path=str(self.path)))
            return

    def note_skipped(self) -> None:
        """One note for the instances that need a torch source when there is none."""
        if not self.skipped:
            return
        names = [name for name, _ in self.skipped]
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        rng = self.locator.find(self.prefix + self.skipped[0][1])
        message = (
            f"{len(names)} instance(s) skipped ({shown}): their templates are read from "
            f"Inductor's own files ({TORCH_PREFIX}...), and {self.torch().not_found_message()}"
        )
        self.out.append(Finding("KT007", Severity.INFO, rng, message, path=str(self.path)))

    def error(self, keys: tuple[str, ...], code: str, message: str) -> None:
        self.out.append(_finding(self.path, self.locator.find(self.prefix + keys), code, message))

    def read(self, data: dict[str, Any], into: dict[str, InstanceSpec]) -> None:
        for key in data:
            if key not in TOP_KEYS:
                hint = did_you_mean(key, TOP_KEYS)
                self.error((key,), "KT003", f"unknown top-level key '{key}'{hint}")
        if "torch" in data:
            self.read_torch_table(data["torch"])
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
        names = list(instances)
        if len(names) > MAX_INSTANCES:
            first_ignored = names[MAX_INSTANCES]
            self.error(
                ("instances", first_ignored),
                "KT002",
                f"{len(names)} instances declared; kls reads the first {MAX_INSTANCES} and "
                f"ignores '{first_ignored}' and the {len(names) - MAX_INSTANCES - 1} after it: "
                "split the instances into one kls.toml per folder of templates",
            )
        for name in names[:MAX_INSTANCES]:
            raw = instances[name]
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
        paths: dict[str, Path | None] = {}
        for key in TEMPLATE_KEYS:
            paths[key] = None
            if key in raw:
                paths[key] = self.template_path(where(key), key, raw[key])
                if paths[key] is None:
                    return None
        template = paths["template"]
        assert template is not None
        kernel_name = raw.get("kernel_name", f"kls_{_c_ident(name)}")
        checks: list[Callable[[], bool]] = [
            lambda: self.kernel_name(
                where("kernel_name") if "kernel_name" in raw else at, name, kernel_name
            ),
            lambda: self.finite(where("alpha"), raw.get("alpha", 1.0)),
            lambda: self.finite(where("beta"), raw.get("beta", 0.0)),
            lambda: self.profile(where("profile"), raw.get("profile", DEFAULT_PROFILE)),
            lambda: self.choice(where("kind"), raw.get("kind", _default_kind(raw)), KINDS),
            lambda: self.reorder(where("input_reorder"), raw.get("input_reorder")),
            lambda: self.arch(where("arch"), raw.get("arch", "90a")),
            lambda: self.reference(where("reference"), raw.get("reference")) is not None,
            lambda: all(self.mod(where(k), k, raw.get(k)) is not None for k in MOD_KEYS),
            lambda: self.tolerance(where("tolerance"), raw.get("tolerance")),
            lambda: self.level(
                where("cutlass_instantiation_level"), raw.get("cutlass_instantiation_level", "0")
            ),
        ]
        if not all([check() for check in checks]):
            return None
        if "tune" in raw:  # a finding, not a lost instance: only `kls tune` reads it
            kind = raw.get("kind", _default_kind(raw))
            self.tune_table(where("tune"), raw["tune"], kind)
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
            profile=RENAMED_PROFILES.get(
                raw.get("profile", ""), raw.get("profile", DEFAULT_PROFILE)
            ),
            kind=raw.get("kind", _default_kind(raw)),
            arch=str(raw.get("arch", "90a")),
            kernel_name=kernel_name,
            tensors=tensors,
            alpha=float(raw.get("alpha", 1.0)),
            beta=float(raw.get("beta", 0.0)),
            input_reorder=tuple(reorder) if reorder is not None else None,
            argument_template=paths["argument_template"],
            epilogue_template=paths["epilogue_template"],
            should_swap_xw=bool(raw.get("should_swap_xw", False)),
            op=raw.get("op"),
            op_filter=op_filter,
            instantiation_level=str(raw.get("cutlass_instantiation_level", "0")),
            variables=dict(raw.get("vars", {})),
            reference=self.reference(where("reference"), raw.get("reference"), quiet=True)
            or _default_reference(raw),
            tolerance=float(raw["tolerance"]) if "tolerance" in raw else None,
            roots=self.instance_roots(raw),
            torch_package=self.torch_package(),
            num_warps=int(raw.get("num_warps", 4)),
            num_stages=int(raw.get("num_stages", 3)),
            device=self.device(where("device"), raw.get("device", {})),
            inductor_template=raw.get("inductor_template"),
            score_mod=self.mod(where("score_mod"), "score_mod", raw.get("score_mod")) or None,
            mask_mod=self.mod(where("mask_mod"), "mask_mod", raw.get("mask_mod")) or None,
            line=self.locator.find(self.prefix + at).start.line,
            op_line=self.locator.find(
                self.prefix + where("op" if "op" in raw else "op_filter")
            ).start.line,
            reorder_range=self.locator.find(self.prefix + where("input_reorder"))
            if reorder is not None
            else None,
        )

    def template_path(self, keys: tuple[str, ...], key: str, value: str) -> Path | None:
        """The real path of a template the config names, or None after a KT004 finding: the
        file is missing, or it lies outside the project (checked first, so nothing outside
        is even probed)."""
        if is_torch_ref(value):
            return self.torch_template(keys, key, value)
        ref = TemplateRef.parse(value)
        candidate = self.path.parent / ref.file
        if not is_inside(candidate, self.roots):
            self.error(
                keys,
                "KT004",
                f"{key} '{value}' resolves to {candidate.resolve()}, outside "
                f"{describe_roots(self.roots)}; kls reads only templates inside the project: "
                "move the file into the project, or name its folder in the kls.extraRoots "
                "setting (CLI: --extra-root DIR)",
            )
            return None
        resolved = candidate.resolve()
        if not resolved.is_file():
            what = "template file" if key == "template" else key
            self.error(keys, "KT004", f"{what} not found: {ref.file}{_colon_hint(key, value)}")
            return None
        if ref.constant is None:
            return resolved
        return self.template_constant(keys, key, resolved, ref.constant)

    def device(self, keys: tuple[str, ...], raw: dict[str, Any]) -> dict[str, Any]:
        """A Triton instance's device model (the keys kls knows, integers; name a string)."""
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in DEVICE_KEYS:
                hint = did_you_mean(key, DEVICE_KEYS)
                self.error(keys + (key,), "KT003", f"unknown device key '{key}'{hint}")
            elif _device_value_ok(key, value):
                out[key] = value
            else:
                self.error(keys + (key,), "KT002", f"device {key} must be a positive integer")
        return out

    def torch_package(self) -> Path | None:
        source = self.torch().source
        return source.package if source is not None else None

    def instance_roots(self, raw: dict[str, Any]) -> tuple[Path, ...]:
        """The project's roots, plus the torch source's _inductor/ for an instance whose
        templates are read from it (so its sub-templates and includes may be too)."""
        source = self.torch().source
        uses_torch = any(is_torch_ref(str(raw.get(k, ""))) for k in TEMPLATE_KEYS)
        if source is None or not uses_torch:
            return self.roots
        return (*self.roots, source.inductor.resolve())

    def torch_template(self, keys: tuple[str, ...], key: str, value: str) -> Path | None:
        """A `torch:` reference as the real path (or `file.py::NAME` id) in the torch source;
        None when there is no source (the instance is skipped with one note) or after a
        KT004 finding."""
        located = self.torch()
        if located.source is None:
            self.skipped.append((keys[1] if len(keys) > 1 else "", keys))
            return None
        ref = TemplateRef.parse(value[len(TORCH_PREFIX) :])
        try:
            file = located.source.path_of(str(ref.file))
        except TorchSourceError as exc:
            self.error(keys, "KT004", f"{key} '{value}': {exc}")
            return None
        if not file.is_file():
            self.error(
                keys,
                "KT004",
                f"{key} '{value}': {located.source.describe()} has no {ref.file}",
            )
            return None
        if ref.constant is None:
            return file
        return self.template_constant(keys, key, file, ref.constant)

    def template_constant(
        self, keys: tuple[str, ...], key: str, file: Path, name: str
    ) -> Path | None:
        """The source id of constant `name` in Python file `file`, or None after a KT004
        finding: not a Python file, or no string constant `name` kls can read without running
        the file (missing, with a 'did you mean'; an f-string; built by `+` or `.format`)."""
        if not is_python_file(file):
            self.error(
                keys,
                "KT004",
                f"{key} '{file.name}{SEPARATOR}{name}': only a Python file (.py) holds template "
                f"constants; name the file itself, or a .py file's constant as file.py::{name}",
            )
            return None
        try:
            constant_in(python_constants(read_file_text(file)), name, file)
        except SourceError as exc:
            where = f" ({file.name}, line {exc.line + 1})" if exc.line else ""
            self.error(keys, "KT004", f"{key} '{file.name}{SEPARATOR}{name}': {exc.message}{where}")
            return None
        except (OSError, UnicodeDecodeError) as exc:
            self.error(keys, "KT004", f"{key}: cannot read {file.name}: {exc}")
            return None
        return TemplateRef(file, name).path

    def kernel_name(self, keys: tuple[str, ...], instance: str, name: str) -> bool:
        problem = _c_identifier_problem(name)
        if problem is None:
            return True
        if keys[-1] == "kernel_name":
            fix = 'set kernel_name to a C identifier, e.g. kernel_name = "kls_gemm"'
            what = f"kernel_name '{name}'"
        else:
            fix = (
                "rename the instance to ASCII letters, digits and '_', or set kernel_name = "
                '"kls_..." to a C identifier'
            )
            what = f"instance name '{instance}' gives the kernel name '{name}', which"
        self.error(keys, "KT002", f"{what} is not a valid C identifier: {problem}; {fix}")
        return False

    def finite(self, keys: tuple[str, ...], value: float) -> bool:
        try:
            if math.isfinite(float(value)):
                return True
        except OverflowError:
            pass
        shown = value if isinstance(value, float) else f"an integer of {len(str(value))} digits"
        self.error(
            keys,
            "KT002",
            f"'{keys[-1]}' is {shown}, which C cannot write as a finite double: use a finite "
            "number below 1.8e308",
        )
        return False

    def choice(self, keys: tuple[str, ...], value: str, allowed: tuple[str, ...]) -> bool:
        if value in allowed:
            return True
        options = ", ".join(allowed)
        hint = did_you_mean(value, allowed)
        self.error(keys, "KT002", f"'{keys[-1]}' is '{value}'{hint}; expected one of {options}")
        return False

    def arch(self, keys: tuple[str, ...], value: str | int) -> bool:
        """The compute capability nvcc is given (`-gencode arch=compute_X`): checked here, on
        its own line, so a typo is not first reported by nvcc at "template 1:1"."""
        problem = arch_problem(str(value))
        if problem is not None:
            self.error(keys, "KT002", problem)
        return problem is None

    def tune_table(self, keys: tuple[str, ...], raw: Any, kind: str) -> None:
        try:
            parse_space(raw, "tune table")
        except TuneSpaceError as exc:  # at the key at fault where the table has it
            at = keys + (exc.key,) if exc.key is not None and exc.key in raw else keys
            self.error(at, "KT002", str(exc))
            return
        if kind == "cuda":
            self.warn(
                keys,
                "KT002",
                "kls tune searches a CUTLASS GEMM's ops (an instance with op or op_filter) or a "
                "Triton instance's configs; this plain CUDA instance has neither, so `kls tune` "
                "refuses it: remove the tune table, or give the instance an op",
            )
        elif kind == "triton":
            for key in GEMM_TUNE_KEYS:
                if key in raw:
                    self.warn(
                        keys + (key,),
                        "KT002",
                        f"a Triton instance's tune searches its configs at its own shapes: "
                        f"'{key}' is for a CUTLASS GEMM's tune table and is not read",
                    )

    def warn(self, keys: tuple[str, ...], code: str, message: str) -> None:
        rng = self.locator.find(self.prefix + keys)
        self.out.append(Finding(code, Severity.WARNING, rng, message, path=str(self.path)))

    def level(self, keys: tuple[str, ...], value: str | int) -> bool:
        problem = level_problem(str(value))
        if problem is not None:
            self.error(keys, "KT002", problem)
        return problem is None

    def reference(
        self, keys: tuple[str, ...], value: str | None, quiet: bool = False
    ) -> str | None:
        """A built-in reference, or "file.py:function" as "/abs/file.py:function" (the file
        inside the project, checked like a template's path; it is only run by `kls bench`, in
        the benchmark worker). "" when absent; None after a finding."""
        if value is None or value in REFERENCES:
            return value or ""
        file, sep, function = value.rpartition(":")
        if not sep or not file.endswith(".py") or not function.isidentifier():
            if not quiet:
                hint = did_you_mean(value, REFERENCES)
                self.error(
                    keys,
                    "KT002",
                    f"'reference' is '{value}'{hint}; expected one of {', '.join(REFERENCES)}, "
                    'or your own function as "file.py:function" (kls.toml relative; it takes the '
                    "inputs as NumPy arrays and returns the outputs: `kls docs reference`)"
                    + _colon_hint("reference", value),
                )
            return None
        if quiet:
            return f"{(self.path.parent / file).resolve()}:{function}"
        path = self.template_path(keys, "reference", file)
        if path is None:
            return None
        return f"{path}:{function}"

    def mod(self, keys: tuple[str, ...], key: str, value: str | None) -> str | None:
        """A flex score_mod/mask_mod "file.py:function" as "/abs/file.py:function" (the file
        inside the project, checked like a template's path; it is only imported by the torch
        worker, where the workspace is trusted). "" when absent; None after a finding."""
        if value is None:
            return ""
        file, sep, function = value.rpartition(":")
        if not sep or not file.endswith(".py") or not function.isidentifier():
            self.error(
                keys,
                "KT002",
                f"'{key}' is '{value}'; name a Python function as \"file.py:function\" "
                '(kls.toml relative), e.g. mask_mod = "mods.py:causal"',
            )
            return None
        path = self.template_path(keys, key, file)
        return None if path is None else f"{path}:{function}"

    def tolerance(self, keys: tuple[str, ...], value: float | None) -> bool:
        if value is None or (isinstance(value, (int, float)) and 0 < value < 1e6):
            return True
        self.error(
            keys,
            "KT002",
            f"'tolerance' is {value}: give the largest relative error the benchmark accepts, a "
            "number > 0 (default by output dtype: bf16/fp16 1e-2, fp32 1e-4, fp64 1e-10)",
        )
        return False

    def profile(self, keys: tuple[str, ...], value: str) -> bool:
        new = RENAMED_PROFILES.get(value)
        if new is None:
            return self.choice(keys, value, registered_profiles())
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
        if not self.within_int64(at + ("shape",), name, "shape", shape):
            return None
        dtype_name = raw.get("dtype")
        dtype = lookup_dtype(dtype_name) if isinstance(dtype_name, str) else None
        if dtype is None:
            hint = suggest_dtype(str(dtype_name))
            self.error(
                at + ("dtype",),
                "KT002",
                f"tensor '{name}' has unknown dtype '{dtype_name}'{hint}; valid dtypes: "
                f"{dtype_choices()}",
            )
            return None
        stride = self.stride(at, name, tuple(shape), raw)
        if stride is None:
            return None
        offset = raw.get("offset", 0)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            self.error(at + ("offset",), "KT002", "'offset' must be a non-negative integer")
            return None
        if not self.within_int64(at + ("offset",), name, "offset", [offset]):
            return None
        if not self.extent_within_int64(at, name, tuple(shape), stride, offset, dtype.size):
            return None
        return TensorSpec(name, tuple(shape), dtype, stride, offset)

    def within_int64(
        self, keys: tuple[str, ...], tensor: str, what: str, values: list[int]
    ) -> bool:
        too_big = [v for v in values if v > INT64_MAX]
        if not too_big:
            return True
        self.error(
            keys,
            "KT002",
            f"tensor '{tensor}': {what} value {too_big[0]} does not fit the int64_t kls emits "
            f"into C (at most {INT64_MAX})",
        )
        return False

    def extent_within_int64(
        self,
        at: tuple[str, ...],
        tensor: str,
        shape: tuple[int, ...],
        stride: tuple[int, ...],
        offset: int,
        itemsize: int,
    ) -> bool:
        """The element count and the last byte the tensor reaches must fit int64_t: the C code
        multiplies sizes and strides in that type."""
        numel = math.prod(shape)
        last = offset + sum((s - 1) * st for s, st in zip(shape, stride) if s > 0)
        if numel * itemsize <= INT64_MAX and (last + 1) * itemsize <= INT64_MAX:
            return True
        key = "stride" if last * itemsize > INT64_MAX and numel * itemsize <= INT64_MAX else "shape"
        self.error(
            at + (key,),
            "KT002",
            f"tensor '{tensor}' spans {max(numel, last + 1)} elements of {itemsize} bytes, more "
            f"than the int64_t byte offsets of the C code can address (at most {INT64_MAX} "
            "bytes): use smaller sizes",
        )
        return False

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
            if any(s < 0 for s in stride):
                self.error(
                    at + ("stride",),
                    "KT002",
                    f"tensor '{name}': strides must be non-negative (0 broadcasts a dimension)",
                )
                return None
            if not self.within_int64(at + ("stride",), name, "stride", stride):
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


def _device_value_ok(key: str, value: Any) -> bool:
    if key == "name":
        return isinstance(value, str)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# What only a CUTLASS GEMM's tune reads (kls.tune.candidates and the dispatch).
GEMM_TUNE_KEYS = ("shapes", "dispatch", "op_filter", "ops", "cutlass_instantiation_level")


def _default_kind(raw: dict[str, Any]) -> str:
    if raw.get("profile") == "triton":
        return "triton"
    return "cutlass_gemm" if ("op" in raw or "op_filter" in raw) else "cuda"


def _default_reference(raw: dict[str, Any]) -> str:
    return "gemm" if _default_kind(raw) == "cutlass_gemm" else UNSET_REFERENCE


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
    """An instance name as it appears in its kernel name: ASCII punctuation becomes '_'; other
    characters are kept (and then refused by `_c_identifier_problem`)."""
    return "".join(ch if ch.isalnum() or ch == "_" or not ch.isascii() else "_" for ch in name)


def _c_identifier_problem(name: str) -> str | None:
    """Why `name` cannot be a C/C++ function name, or None when it can."""
    if not name:
        return "it is empty"
    if C_IDENTIFIER.fullmatch(name):
        return f"'{name}' is a C++ keyword" if name in CPP_KEYWORDS else None
    if name[0].isdigit():
        return "it starts with a digit"
    bad = next(ch for ch in name if not (ch.isascii() and (ch.isalnum() or ch == "_")))
    return f"{bad!r} (U+{ord(bad):04X}) is not an ASCII letter, digit or '_'"
