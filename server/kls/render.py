"""Render an instance with Inductor-compatible semantics, returning CUDA text and a source map.

The environment is Jinja's sandbox (templates are untrusted input) with StrictUndefined as in
Inductor, plus two bounds: wall time and output size.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import jinja2
from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError

from kls.cutlass.ops import OpLookupError
from kls.findings import Severity
from kls.input_limits import MAX_TEMPLATE_BYTES
from kls.instances.roots import (
    ConfinedFileSystemLoader,
    TemplateOutsideProject,
    project_roots,
    read_inside,
)
from kls.instances.schema import InstanceSpec
from kls.profiles import ConfigProblem, profile
from kls.runtime.buffers import Buffer
from kls.runtime.kernel import Kernel
from kls.runtime.policy import AllowlistSandbox, SandboxLimit
from kls.runtime.record import Recorder, RenderAbort, RuntimeFinding, Site
from kls.runtime.result import RenderResult
from kls.sourcemap import (
    Origin,
    OutputRecorder,
    SourceMap,
    SourceMapCodeGenerator,
    Where,
    compile_shape,
    line_origins,
    template_shape,
)
from kls.template.source import SourceError, is_python_ref, read_source

__all__ = ["LimitExceeded", "Limits", "RenderResult", "context_names", "prepare_op", "render"]

# Compiled template code, process-wide (it holds no per-render state: the source-map positions
# it records are constants, and the recorder is the environment's).
# Keyed by (path, marked, text) -> (code, the data it reads or None), and (path, shape key) ->
# (code, ()) for marked code that reads its data from `kls_data` (kls.sourcemap.template_shape).
_CODE_CACHE: dict[tuple[Any, ...], tuple[Any, tuple[str, ...] | None]] = {}
_CODE_CACHE_SIZE = 128
_CODE_CACHE_LOCK = threading.Lock()  # renders run on several threads


def _recall(key: tuple[Any, ...]) -> tuple[Any, tuple[str, ...] | None] | None:
    """A cached entry, now the most recently used (a shape outlives the texts that use it)."""
    with _CODE_CACHE_LOCK:
        found = _CODE_CACHE.pop(key, None)
        if found is not None:
            _CODE_CACHE[key] = found
        return found


def _remember(key: tuple[Any, ...], found: tuple[Any, tuple[str, ...] | None]) -> None:
    with _CODE_CACHE_LOCK:
        while len(_CODE_CACHE) >= _CODE_CACHE_SIZE:
            del _CODE_CACHE[next(iter(_CODE_CACHE))]
        _CODE_CACHE[key] = found


@dataclass(frozen=True)
class Limits:
    seconds: float = 5.0
    max_bytes: int = 16 * 1024 * 1024


class LimitExceeded(Exception):
    pass


_DEBUG_INFO: dict[str, list[tuple[int, int]]] = {}  # Jinja's debug_info string, parsed


class KlsTemplate(jinja2.Template):
    """Jinja's Template, whose map from generated code lines to template lines is parsed once
    per compiled code (Jinja parses it again on every lookup, and kls looks up the template
    line of every helper call)."""

    @property
    def debug_info(self) -> list[tuple[int, int]]:
        raw = self._debug_info
        found = _DEBUG_INFO.get(raw)
        if found is None:
            found = jinja2.Template.debug_info.fget(self)  # type: ignore[attr-defined]
            if len(_DEBUG_INFO) >= 4 * _CODE_CACHE_SIZE:
                _DEBUG_INFO.clear()
            _DEBUG_INFO[raw] = found
        return found


class KlsEnvironment(AllowlistSandbox):
    """Sandboxed (an allowlist of the documented API), StrictUndefined, source-mapped and
    time-bounded."""

    def __init__(self, loader: jinja2.BaseLoader | None, deadline: float, mark: bool) -> None:
        super().__init__(
            undefined=jinja2.StrictUndefined,
            loader=loader,
            autoescape=False,
        )
        # Source map (kls.sourcemap): compiled code reports each output write's position to
        # `kls_out`, out of band; the rendered text is exactly plain Jinja's either way.
        self.kls_mark = mark
        self.kls_recorder = OutputRecorder()
        self.kls_out = self.kls_recorder.out
        if mark:
            self.code_generator_class = SourceMapCodeGenerator
        self.template_class = KlsTemplate
        self.deadline = deadline

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if time.monotonic() > __self.deadline:
            raise LimitExceeded("time")
        return super().call(__context, __obj, *args, **kwargs)


class _Renderer:
    def __init__(
        self, instance: InstanceSpec, overrides: dict[Path, str], limits: Limits, mark: bool
    ) -> None:
        self.instance = instance
        self.overrides = {p.resolve(): t for p, t in overrides.items()}
        self.limits = limits
        self.start = time.monotonic()
        roots = instance.roots or project_roots(instance.config_path)
        loader = ConfinedFileSystemLoader(instance.template.parent, roots)
        self.roots = roots
        self.env = KlsEnvironment(loader, self.start + limits.seconds, mark)
        self.recorder = Recorder()
        self.profile = profile(instance.profile)
        self.kernel: Kernel = self.profile.new_kernel(instance, self.recorder)
        self.text_to_path: dict[str, str] = {}
        self.compiled: dict[str, jinja2.Template] = {}
        self.files: list[str] = []
        self.size = 0
        self.sub_maps: dict[str, list[Origin | None]] = {}

    def read(self, path: Path) -> str:
        try:
            resolved = path.resolve()
        except OSError:  # swapped while resolving (EINVAL): read_inside decides
            resolved = path
        if resolved in self.overrides:
            return self.overrides[resolved]
        if is_python_ref(path):  # a Python file's constant, read with ast (editor text wins)
            try:
                return read_source(path, self.overrides).text
            except SourceError as exc:
                raise OSError(exc.message) from None
        # Opened first, then checked: what is read is what was checked (kls.instances.roots).
        data = read_inside(path, self.roots, f"template {path.name}", MAX_TEMPLATE_BYTES)
        if len(data) > MAX_TEMPLATE_BYTES:
            raise OSError(f"{path} is larger than {MAX_TEMPLATE_BYTES // 1024} KiB")
        return data.decode("utf-8")

    def compile(self, source: str, path: str) -> jinja2.Template:
        key = f"{path}\0{source}"
        if key not in self.compiled:
            code, data = self._code(source, path)
            template = self.env.template_class.from_code(
                self.env, code, self.env.make_globals(None), None
            )
            if data is not None:  # the template's text, which the shared code reads
                template.root_render_func.__globals__["kls_data"] = data
            self.compiled[key] = template
            self.recorder.code_to_template[path] = template
        return self.compiled[key]

    def _code(self, source: str, path: str) -> tuple[Any, tuple[str, ...] | None]:
        """Compiled Python code for a template text, shared across renders (compiling is the
        most expensive step of a warm render), and the data it reads (None: none).

        With source-map marking, the code is shared by every text of the same shape
        (kls.sourcemap.template_shape: the same Jinja tokens on the same lines, any template
        data): an edit of the text outside `{{ }}`, `{% %}` and `{# #}` that adds no line
        compiles nothing."""
        mark = self.env.kls_mark
        by_text = (path, mark, source)
        found = _recall(by_text)
        if found is None:
            found = self._code_of_shape(source, path) if mark else None
            if found is None:
                found = (self.env.compile(source, name=path, filename=path), None)
            _remember(by_text, found)
        self.files.append(path)
        return found

    def _code_of_shape(self, source: str, path: str) -> tuple[Any, tuple[str, ...]] | None:
        shape = template_shape(self.env, source, path, path)
        if shape is None:
            return None
        key = (path, shape.key)
        found = _recall(key)
        if found is None:
            try:
                found = (compile_shape(self.env, shape, path, path), ())
            except Exception:
                return None  # compiled as text instead, which raises Jinja's own error
            _remember(key, found)
        return found[0], shape.data

    def generate(
        self, template: jinja2.Template, context: dict[str, Any]
    ) -> tuple[str, list[Origin | None] | None]:
        """The rendered text (exactly plain Jinja's) and, when marking, each line's origin."""
        chunks: list[str] = []
        wheres: list[Where | None] = []
        take = self.env.kls_recorder.take
        take()  # a position left over from a render that raised
        for chunk in template.generate(context):
            chunks.append(chunk)
            wheres.append(take())
            self.size += len(chunk)
            if self.size > self.limits.max_bytes:
                raise LimitExceeded("size")
            if time.monotonic() > self.env.deadline:
                raise LimitExceeded("time")
        text = "".join(chunks)
        if not self.env.kls_mark:
            return text, None
        return text, line_origins(chunks, wheres, self.sub_maps)

    def render_sub(self, source: str, context: dict[str, Any]) -> str:
        path = self.text_to_path.get(source, "<sub-template>")
        text, origins = self.generate(self.compile(source, path), context)
        if origins is not None:
            self.sub_maps[text] = origins
        return text


def render(
    instance: InstanceSpec,
    overrides: dict[Path, str] | None = None,
    limits: Limits | None = None,
    mark: bool = True,
) -> RenderResult:
    """Render `instance`; `overrides` gives unsaved editor text by path.

    The text is exactly what plain Jinja renders for the same context; `mark=True` also
    builds the source map, out of band (kls.sourcemap). `mark=False` skips the map (used to
    prove that mapping never changes the output).
    """
    seconds = limits.seconds if limits is not None else None
    elsewhere = profile(instance.profile).render_elsewhere(instance, overrides or {}, seconds)
    if elsewhere is not None:  # e.g. Inductor's own render of a Triton template
        return cast(RenderResult, elsewhere)
    r = _Renderer(instance, overrides or {}, limits or Limits(), mark)
    result = RenderResult(instance, None, None, r.recorder.calls, r.recorder.findings)
    result.kernel = r.kernel
    main_path = str(instance.template)
    try:
        context = _context(r, instance, result)
        source = r.read(instance.template)
        text, origins = r.generate(r.compile(source, main_path), context)
    except RenderAbort:
        pass
    except (OpLookupError, ConfigProblem) as exc:
        r.recorder.findings.append(
            RuntimeFinding(
                "KT005", Severity.ERROR, str(exc), Site(str(instance.config_path), instance.op_line)
            )
        )
    except LimitExceeded as exc:
        what = (
            f"took longer than {r.limits.seconds:g} s"
            if str(exc) == "time"
            else f"produced more than {r.limits.max_bytes // (1024 * 1024)} MB"
        )
        r.recorder.findings.append(
            RuntimeFinding(
                "KT104",
                Severity.ERROR,
                f"rendering {what}; is a loop unbounded?",
                _site_from_traceback(exc, r),
            )
        )
    except (SandboxLimit, MemoryError) as exc:
        what = str(exc) if isinstance(exc, SandboxLimit) else "rendering ran out of memory"
        r.recorder.findings.append(
            RuntimeFinding(
                "KT104",
                Severity.ERROR,
                f"{what}; is a value or loop unbounded?",
                _site_from_traceback(exc, r),
            )
        )
    except TemplateSyntaxError as exc:
        site = Site(exc.filename or main_path, max((exc.lineno or 1) - 1, 0))
        r.recorder.findings.append(
            RuntimeFinding("KT101", Severity.ERROR, exc.message or str(exc), site)
        )
    except UndefinedError as exc:
        r.recorder.findings.append(
            RuntimeFinding("KT102", Severity.ERROR, str(exc.message), _site_from_traceback(exc, r))
        )
    except TemplateOutsideProject as exc:
        r.recorder.findings.append(
            RuntimeFinding(
                "KT105", Severity.ERROR, exc.message or str(exc), _site_from_traceback(exc, r)
            )
        )
    except (UnicodeDecodeError, OSError) as exc:
        r.recorder.findings.append(
            RuntimeFinding(
                "KT105", Severity.ERROR, f"cannot read template: {exc}", Site(main_path, 0)
            )
        )
    except SecurityError as exc:
        r.recorder.findings.append(
            RuntimeFinding(
                "KT106",
                Severity.ERROR,
                f"the sandbox refused this: {str(exc.message or exc).rstrip('.')}; templates "
                "may use only the documented API of their profile (`kls rules`, "
                "docs/SECURITY.md)",
                _site_from_traceback(exc, r),
            )
        )
    except (RecursionError, Exception) as exc:  # a template that raises
        name = type(exc).__name__
        r.recorder.findings.append(
            RuntimeFinding(
                "KT103",
                Severity.ERROR,
                f"rendering raised {name}: {exc}",
                _site_from_traceback(exc, r),
            )
        )
    else:
        result.text = text
        result.source_map = SourceMap(origins) if origins is not None else None
        r.profile.finish(result)
        result.params = r.kernel.params()
    mapped = {o.path for o in result.source_map.origins if o} if result.source_map else set()
    result.files = list(dict.fromkeys([*r.files, *sorted(mapped)]))
    result.seconds = time.monotonic() - r.start
    return result


def _site_from_traceback(exc: BaseException, r: _Renderer) -> Site | None:
    """Jinja rewrites tracebacks so template frames carry template file and line."""
    site: Site | None = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in r.recorder.code_to_template and frame.lineno is not None:
            site = Site(frame.filename, frame.lineno - 1)
    return site


def context_names(instance: InstanceSpec) -> list[str]:
    """Every name a template of this instance may use (for 'did you mean')."""
    facts = profile(instance.profile)
    names = {*instance.variables, *instance.tensors, *facts.context_names(instance.kind)}
    if instance.kind == "cutlass_gemm":
        names |= set(facts.gemm_buffers)
    names -= set(facts.runtime_variables(instance))  # arguments of the entry, not of Jinja
    return sorted(names | set(jinja2.Environment().globals))


def _context(r: _Renderer, instance: InstanceSpec, result: RenderResult) -> dict[str, Any]:
    """The instance's buffers, and its profile's context for them."""
    buffers: dict[str, Buffer | None] = {
        name: Buffer.of(spec) if spec is not None else None
        for name, spec in instance.tensors.items()
    }
    output = buffers.get("Y") or next((b for b in reversed(list(buffers.values())) if b), None)
    return r.profile.render_context(r, instance, result, buffers, output)


def prepare_op(instance: InstanceSpec) -> None:
    """Look up and emit the instance's op, filling the op caches, so that a render after it
    finds them warm. Listing the ops is kls's own trusted work, and slow the first time at a
    high `cutlass_instantiation_level` (level "2222": seconds): render workers call this
    before a render's deadline starts, so the deadline measures template code only.
    Problems are left for the render to report."""
    try:
        profile(instance.profile).prepare_op(instance)
    except Exception:
        return
