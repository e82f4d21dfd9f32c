"""Run every check on a template file: static checks, then each instance that renders it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kls.checks.module import module_findings
from kls.checks.rendered import Models, render_findings
from kls.checks.reorder import reorder_findings
from kls.checks.static import static_findings
from kls.checks.syntax import syntax_findings
from kls.checks.triton_static import RENDER_TWINS, instance_findings
from kls.checks.walk import project_files
from kls.findings import Finding, Severity
from kls.input_limits import MAX_TEMPLATE_BYTES, MAX_TEMPLATE_CODE_BYTES, MAX_TEMPLATE_LINES
from kls.instances import InstanceSet, InstanceSpec, find_config, load_instances
from kls.positions import Range
from kls.profiles import profile
from kls.render import RenderResult
from kls.sandbox.workers import PendingRender, render_isolated
from kls.template.model import TemplateModel, parse_template
from kls.template.pysource import PyConstant, python_constants
from kls.template.source import (
    SourceError,
    TemplateRef,
    findings_to_file,
    is_python_file,
    read_file_text,
    read_source,
)

TEMPLATE_SUFFIXES = (".cu.jinja", ".cuh.jinja", ".cu.j2", ".cuh.j2", ".jinja", ".j2")
JINJA_CODE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    renders: dict[str, RenderResult] = field(default_factory=dict)
    cancelled: bool = False
    # Render-time findings about a config line (an unknown op, a reorder the template never
    # passes): they belong to kls.toml, not to the checked file, and are shown there.
    config_findings: list[Finding] = field(default_factory=list)
    configs: list[Path] = field(default_factory=list)  # the configs `kls check` read
    # Instances not rendered because their template does not parse (a KT101 says why).
    unparsed: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == Severity.ERROR)


def is_template(path: Path) -> bool:
    return path.name.endswith(TEMPLATE_SUFFIXES)


def read_template(
    path: Path, overrides: dict[Path, str] | None = None
) -> tuple[str | None, Finding | None]:
    """The text, or a KT105 finding that says why it cannot be used. Never reads more than
    MAX_TEMPLATE_BYTES + 1 bytes, whatever the file's size. `path` may name a Python file's
    constant (`file.py::NAME`, kls.template.source): its text is read from the file (or its
    editor text in `overrides`) with `ast`."""
    if TemplateRef.parse(path).constant is not None:
        return _read_constant(path, overrides)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        return None, Finding(
            "KT105", Severity.ERROR, Range.of_line(0), f"cannot read: {exc}", path=str(path)
        )
    if len(data) > MAX_TEMPLATE_BYTES:
        return None, _too_large(path, f"larger than {_kib(MAX_TEMPLATE_BYTES)}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n")
        return None, Finding(
            "KT105",
            Severity.ERROR,
            Range.of_line(line),
            f"template is not UTF-8 (byte {exc.start}: {exc.reason}); save it as UTF-8",
            path=str(path),
        )
    problem = template_size_problem(path, text)
    return (None, problem) if problem is not None else (text, None)


def _read_constant(
    path: Path, overrides: dict[Path, str] | None
) -> tuple[str | None, Finding | None]:
    try:
        text = read_source(path, overrides).text
    except SourceError as exc:
        return None, Finding(
            "KT105", Severity.ERROR, Range.of_line(exc.line), exc.message, path=str(path)
        )
    except (OSError, UnicodeDecodeError) as exc:
        return None, Finding(
            "KT105", Severity.ERROR, Range.of_line(0), f"cannot read: {exc}", path=str(path)
        )
    problem = template_size_problem(path, text)
    return (None, problem) if problem is not None else (text, None)


def template_size_problem(path: Path, text: str) -> Finding | None:
    """A KT105 finding when `text` is beyond what kls parses in about a second (the bounds and
    their measurements are in kls.input_limits), else None."""
    long = len(text) > MAX_TEMPLATE_BYTES  # at least one byte a character: no need to encode
    size = len(text) if long else len(text.encode("utf-8", errors="replace"))
    if size > MAX_TEMPLATE_BYTES:
        return _too_large(path, f"{_kib(size)}, more than {_kib(MAX_TEMPLATE_BYTES)}")
    lines = text.count("\n") + 1
    if lines > MAX_TEMPLATE_LINES:
        return _too_large(path, f"{lines} lines, more than {MAX_TEMPLATE_LINES}")
    code = sum(len(m) for m in JINJA_CODE.findall(text))
    if code > MAX_TEMPLATE_CODE_BYTES:
        return _too_large(
            path,
            f"{_kib(code)} of Jinja code inside {{{{ }}}} and {{% %}}, more than "
            f"{_kib(MAX_TEMPLATE_CODE_BYTES)}",
        )
    return None


def _too_large(path: Path, how: str) -> Finding:
    return Finding(
        "KT105",
        Severity.ERROR,
        Range.of_line(0),
        f"template is {how}, beyond what kls checks in about a second; split it into "
        "sub-templates ({% include %} or argument_template/epilogue_template)",
        path=str(path),
    )


def _kib(size: int) -> str:
    return f"{size / 1024:,.0f} KiB" if size < 1024 * 1024 else f"{size / (1024 * 1024):.1f} MiB"


class ModelCache:
    """What one check run shares: parsed models by path (editor text wins over the file on
    disk) and each instance's checked render, so a main template and its sub-templates, checked
    one after the other, render an instance once."""

    def __init__(self, overrides: dict[Path, str] | None = None) -> None:
        self.overrides = {p.resolve(): t for p, t in (overrides or {}).items()}
        self.models: dict[str, TemplateModel] = {}
        # By (config, instance name): two configs may both name an instance "i".
        self.checked: dict[tuple[str, str], tuple[RenderResult, list[Finding]]] = {}
        # Renders a caller started ahead, by instance name (the language server starts the
        # active instance's render before the template is parsed, so the two overlap).
        self.started: dict[str, PendingRender] = {}

    def model(self, path: str) -> TemplateModel | None:
        if path not in self.models:
            text = self.overrides.get(Path(path).resolve())
            if text is not None and template_size_problem(Path(path), text) is not None:
                return None
            if text is None:
                text, _ = read_template(Path(path), self.overrides)
            if text is None:
                return None
            self.models[path] = parse_template(text)
        return self.models[path]

    def for_render(self, result: RenderResult) -> Models:
        return Models({p: m for p in result.files if (m := self.model(p)) is not None})


def check_instance(instance: InstanceSpec, cache: ModelCache) -> tuple[RenderResult, list[Finding]]:
    key = (str(instance.config_path), instance.name)
    if key not in cache.checked:
        started = cache.started.pop(instance.name, None)
        result = started.result() if started else render_isolated(instance, cache.overrides)
        models = cache.for_render(result)
        about_config, runtime = reorder_findings(result)
        findings = render_findings(replace(result, findings=runtime), models)
        rendered_checks = (
            syntax_findings if profile(instance.profile).language == "cuda" else module_findings
        )
        findings += rendered_checks(result, models) + about_config
        cache.checked[key] = (result, [_tag(f, instance.name) for f in findings])
    return cache.checked[key]


def _tag(f: Finding, instance: str) -> Finding:
    return Finding(f.code, f.severity, f.range, f.message, f.path, instance, f.source, f.related)


def check_file(
    path: Path,
    text: str | None = None,
    instances: InstanceSet | None = None,
    cache: ModelCache | None = None,
    only: set[str] | None = None,
    cancelled: Callable[[], bool] | None = None,
    render: bool = True,
) -> CheckResult:
    """Findings located in `path`, from its static checks and every instance that reads it
    (or only the instances named in `only`; with `render` False, their static checks only:
    the editor's first answer where a render takes long). `path` may be a Python file
    (`text` its editor text): its template constants that instances read are checked, and the
    findings are in the file's own lines and columns; likewise for one constant
    (`file.py::NAME`)."""
    ref = TemplateRef.parse(path).resolve()
    if ref.constant is None and is_python_file(ref.file):
        return check_python_file(ref.file, text, instances, cache, only, cancelled, render)
    if ref.constant is not None:
        result = _check_source(ref.path, text, instances, cache, only, cancelled, render)
        overrides = cache.overrides if cache is not None else {}
        result.findings = findings_to_file(result.findings, overrides)
        return result
    return _check_source(ref.path, text, instances, cache, only, cancelled, render)


def check_python_file(
    path: Path,
    text: str | None = None,
    instances: InstanceSet | None = None,
    cache: ModelCache | None = None,
    only: set[str] | None = None,
    cancelled: Callable[[], bool] | None = None,
    render: bool = True,
) -> CheckResult:
    """Every template constant of Python file `path` that an instance reads, checked (with
    `render` False, statically only, as check_file); the
    findings are in the file's own lines and columns, so they lie inside the template strings
    (or, for a constant kls cannot read, on its assignment line)."""
    path = path.resolve()
    result = CheckResult()
    cache = cache or ModelCache()
    if text is not None:
        cache.overrides[path] = text
    sources = instances.sources_in(path) if instances is not None else []
    for source_id in sources or jinja_constants(path, cache.overrides):
        if cancelled is not None and cancelled():
            result.cancelled = True
            break
        source_text, problem = read_template(Path(source_id), cache.overrides)
        if problem is not None:
            result.findings.append(problem)
            continue
        checked = _check_source(
            Path(source_id), source_text, instances, cache, only, cancelled, render
        )
        result.findings.extend(checked.findings)
        result.config_findings.extend(checked.config_findings)
        result.renders.update(checked.renders)
        result.unparsed.extend(checked.unparsed)
        if checked.cancelled:
            result.cancelled = True
            break
    result.findings = findings_to_file(result.findings, cache.overrides)
    return result


def jinja_constants(path: Path, overrides: dict[Path, str] | None = None) -> list[str]:
    """The source ids of the string constants of Python file `path` that contain Jinja code
    (`{{`, `{%`): with no instance reading the file, they still get the static checks."""
    try:
        module = python_constants(read_file_text(path, overrides))
    except (OSError, UnicodeDecodeError, SourceError):
        return []
    return [
        TemplateRef(path, name).id
        for name, c in module.constants.items()
        if isinstance(c, PyConstant) and ("{{" in c.value or "{%" in c.value)
    ]


def _check_source(
    path: Path,
    text: str | None,
    instances: InstanceSet | None,
    cache: ModelCache | None,
    only: set[str] | None,
    cancelled: Callable[[], bool] | None,
    render: bool = True,
) -> CheckResult:
    """check_file on one template (a file, or a constant's source id), in its own positions."""
    result = CheckResult()
    if text is None:
        text, problem = read_template(path, cache.overrides if cache is not None else None)
        if problem is not None:
            result.findings.append(problem)
            return result
    assert text is not None
    too_large = template_size_problem(path, text)
    if too_large is not None:  # editor text, which read_template did not see
        result.findings.append(too_large)
        return result
    cache = cache or ModelCache({path: text})
    cache.overrides.setdefault(path, text)
    model = parse_template(text)
    cache.models[str(path)] = model
    readers = instances.depends_on(path) if instances is not None else []
    static = static_findings(model, str(path), sorted({(i.profile, i.kind) for i in readers}))
    chosen = [i for i in readers if only is None or i.name in only]
    for f in dedupe(instance_findings(model, str(path), chosen)):
        (static if f.path == str(path) else result.config_findings).append(f)
    runtime: list[Finding] = []
    if model.syntax_error is not None and render:
        result.unparsed = [i.name for i in chosen]
    if model.syntax_error is None and instances is not None and render:
        for instance in readers:
            if only is not None and instance.name not in only:
                continue
            if cancelled is not None and cancelled():
                result.cancelled = True
                return result
            rendered, findings = check_instance(instance, cache)
            result.renders[instance.name] = rendered
            runtime.extend(f for f in findings if f.path == str(path))
            config = str(instance.config_path)
            result.config_findings.extend(f for f in findings if f.path == config)
    # Static and render-time checks may both see one problem: the static one has the more
    # exact range and wins.
    seen_static = {(RENDER_TWINS.get(f.code, f.code), f.range.start.line) for f in static}
    seen_static |= {(f.code, f.range.start.line) for f in static}
    runtime = [f for f in dedupe(runtime) if (f.code, f.range.start.line) not in seen_static]
    result.findings = apply_noqa(drop_consequences(static + runtime), cache)
    result.config_findings = dedupe(result.config_findings)
    return result


def drop_consequences(findings: list[Finding]) -> list[Finding]:
    """A rendered-syntax error on a line that already has another error is its consequence
    (e.g. a missing `.getvalue()` prints an object repr): report the cause only. A parse
    that a limit stopped (a KT501 warning) is nobody's consequence and stays."""
    caused = {
        (f.path, f.range.start.line)
        for f in findings
        if f.code != "KT501" and f.severity == Severity.ERROR
    }
    return [
        f
        for f in findings
        if f.code != "KT501"
        or f.severity != Severity.ERROR
        or (f.path, f.range.start.line) not in caused
    ]


def dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (file, code, range), e.g. the same problem seen by several instances."""
    seen: set[tuple[str, str, Range]] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.path, f.code, f.range)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def apply_noqa(findings: list[Finding], cache: ModelCache) -> list[Finding]:
    kept = []
    for f in findings:
        model = cache.models.get(f.path)
        if model is not None and model.is_silenced(f.code, f.range.start.line):
            continue
        kept.append(f)
    return kept


def _render_key(renders: dict[str, RenderResult], name: str, rendered: RenderResult) -> str:
    """`name`, or `folder/name` when another config's instance has that name already."""
    known = renders.get(name)
    if known is None or known.instance.config_path == rendered.instance.config_path:
        return name
    return f"{rendered.instance.config_path.parent.name}/{name}"


def check_paths(paths: list[Path], extra_roots: Iterable[Path] = ()) -> CheckResult:
    """`kls check`: every template under `paths` and every instance of the configs found
    (whose templates may also lie under `extra_roots`)."""
    extra_roots = tuple(extra_roots)
    result = CheckResult()
    files: list[Path] = []
    configs: dict[Path, InstanceSet] = {}
    for root in paths:
        if root.is_file() and root.suffix == ".toml":
            # A config: check it and every template its instances read.
            instance_set = configs.setdefault(
                root.resolve(), load_instances(root, extra_roots=extra_roots)
            )
            for spec in instance_set.instances.values():
                for p in (spec.template, spec.argument_template, spec.epilogue_template):
                    if p is not None and p not in files:
                        files.append(p)
            continue
        if root.is_dir():
            # Every config below the folder (and the one it lies in), and their templates.
            found = project_files(root, is_template)
            files.extend(found.templates)
            above = find_config(root)
            for below in dict.fromkeys([*([above] if above else []), *found.configs]):
                if below not in configs:
                    configs[below] = load_instances(below, extra_roots=extra_roots)
                python = configs[below].python_files()
                files.extend(p for p in python if p.is_relative_to(root.resolve()))
                # Inductor's own files the config's instances read
                files.extend(p for p in configs[below].upstream_files() if p not in files)
        elif root.is_file():
            files.append(root)
        else:
            result.findings.append(
                Finding(
                    "KT105",
                    Severity.ERROR,
                    Range.of_line(0),
                    "no such file or directory",
                    path=str(root),
                )
            )
        config = find_config(root if root.exists() else Path.cwd())
        if config is not None and config not in configs:
            configs[config] = load_instances(config, extra_roots=extra_roots)
    for instance_set in configs.values():
        result.findings.extend(instance_set.findings)
    cache = ModelCache()
    for file in dict.fromkeys(files):
        config = find_config(file)
        explicit = [c for c, i in configs.items() if i.depends_on(file)]
        instances = (
            configs.get(explicit[0]) if explicit else (configs.get(config) if config else None)
        )
        checked = check_file(file, instances=instances, cache=cache)
        result.findings.extend(checked.findings)
        result.findings.extend(checked.config_findings)
        for name, rendered in checked.renders.items():
            result.renders[_render_key(result.renders, name, rendered)] = rendered
        result.unparsed.extend(n for n in checked.unparsed if n not in result.unparsed)
    # Instances whose template lies outside the checked paths still get their config checked.
    result.findings = dedupe(result.findings)
    result.configs = sorted(configs)
    return result
