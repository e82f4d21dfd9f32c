"""Checks that need a rendered instance: runtime findings, unused buffers, the C contract."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from kls.checks.catalogue import rule
from kls.checks.signatures import helper_sig
from kls.findings import Finding, Severity
from kls.positions import Position, Range
from kls.profiles import profile
from kls.render import RenderResult, context_names
from kls.runtime.record import RuntimeFinding, Site
from kls.sourcemap import Origin
from kls.suggest import did_you_mean
from kls.template.model import HelperCall, TemplateModel

WORKSPACE_QUERY = re.compile(r"if\s*\(\s*(workspace_size\s*(!=\s*(nullptr|NULL|0))?)\s*\)")
NULL_CHECK = re.compile(r"if\s*\(\s*!\s*\w+\s*\)|throw std::runtime_error\(\"input ")
BRACES = re.compile(r"[{}]")
LAUNCH = re.compile(r"<<<|\bgemm_op\s*\(\s*stream|\.initialize\s*\(|\.run\s*\(|cudaLaunchKernel")
# Patterns that start with a literal, not \b: a leading \b costs the regex engine its fast
# scan for the literal (~50x on a rendered CUTLASS instance); `_at_word_start` checks it.
DOUBLED_EXPORT = re.compile(r"PT_EXPORT\s+PT_EXPORT\b")
WORD_CHAR = re.compile(r"\w")
NAME_OR_DOT = re.compile(r"[\w.]")
# Macros template.globals() defines that rendered code commonly uses.
GLOBALS_MACROS = ("PT_EXPORT", "CUTLASS_CHECK")
C_KEYWORDS = frozenset(
    {"return", "case", "goto", "else", "delete", "throw", "typedef", "using", "new", "sizeof"}
)


@dataclass
class Models:
    """Parsed models of the files a render touched, by path (parsed once, shared)."""

    by_path: dict[str, TemplateModel]

    def get(self, path: str) -> TemplateModel | None:
        return self.by_path.get(path)


def line_range(model: TemplateModel | None, line: int) -> Range:
    if model is None:
        return Range.of_line(line)
    text = model.index.line_text(line)
    indent = len(text) - len(text.lstrip())
    return Range(Position(line, indent), Position(line, len(text.rstrip())))


def render_findings(result: RenderResult, models: Models) -> list[Finding]:
    name = result.instance.name
    out = [_from_runtime(f, result, models) for f in result.findings]
    if result.ok and profile(result.instance.profile).language == "cuda":  # the C contract
        out.extend(_unused_buffers(result, models))
        out.extend(_globals_missing(result, models))
        out.extend(_doubled_export(result, models))
        out.extend(_contract(result, models))
        out.extend(_redeclared_params(result, models))
    return [
        Finding(f.code, f.severity, f.range, f.message, f.path, name, f.source, f.related)
        for f in out
    ]


def _from_runtime(f: RuntimeFinding, result: RenderResult, models: Models) -> Finding:
    site = f.site or Site(str(result.instance.template), 0)
    model = models.get(site.path)
    message = f.message
    rng = line_range(model, site.line)
    if f.code == "KT102":
        rng, message = _undefined(model, site, message, result)
    elif f.helper is not None and model is not None:
        call = _call_on_line(model, f.helper, site.line)
        if call is not None:
            rng = _arg_range(call, f.arg_index, result.instance.profile) or call.range
    return Finding(f.code, f.severity, rng, message, path=site.path)


def _undefined(
    model: TemplateModel | None, site: Site, message: str, result: RenderResult
) -> tuple[Range, str]:
    match = re.match(r"'([^']+)' is undefined", message)
    rng = line_range(model, site.line)
    if not match:
        return rng, message
    name = match.group(1)
    hint = did_you_mean(name, context_names(result.instance))
    uses = model.name_uses.get(name, []) if model else []
    on_line = [u for u in uses if u.start.line == site.line] or uses
    if on_line:
        rng = on_line[0]
    facts = profile(result.instance.profile)
    owner = next((o for o in ("kernel", "template") if name in facts.api(o)), None)
    if owner is not None:  # e.g. {{kernel_name}} in a torch-2.11 GEMM, as in Inductor
        return rng, (
            f"'{name}' is undefined for instance '{result.instance.name}' (a "
            f"{result.instance.kind} template of profile {facts.name} has no bare '{name}'); "
            f"write {owner}.{name}"
        )
    return rng, (
        f"'{name}' is undefined for instance '{result.instance.name}'{hint}; "
        "declare it under vars/tensors in kls.toml or fix the name"
    )


def _call_on_line(model: TemplateModel, helper: str, line: int) -> HelperCall | None:
    for call in model.calls:
        if call.helper == helper and call.range.start.line <= line <= call.range.end.line:
            return call
    return None


def _arg_range(call: HelperCall, index: int | None, profile: str) -> Range | None:
    if index is None:
        return None
    sig = helper_sig(call.owner, call.helper, profile)
    name = sig.params[index].name if sig and index < len(sig.params) else ""
    arg = call.arg(index, name)
    return arg.value_range if arg else None


def _def_kernel_site(result: RenderResult, models: Models) -> tuple[str, Range]:
    kernel = result.kernel
    if kernel and kernel.def_kernel_calls and kernel.def_kernel_calls[0].site:
        site = kernel.def_kernel_calls[0].site
        model = models.get(site.path)
        call = _call_on_line(model, "def_kernel", site.line) if model else None
        return site.path, call.range if call else line_range(model, site.line)
    path = str(result.instance.template)
    return path, line_range(models.get(path), 0)


def _unused_buffers(result: RenderResult, models: Models) -> Iterator[Finding]:
    kernel = result.kernel
    if kernel is None:
        return
    for c_name, node in kernel.named_nodes.items():
        if c_name in kernel.declared and node.get_name() not in kernel.used:
            path, rng = _def_kernel_site(result, models)
            yield Finding(
                "KT205",
                rule("KT205").severity,
                rng,
                f"buffer '{c_name}' is declared in def_kernel but no helper uses it in this "
                "instance; its C parameter is dead (or the template forgot kernel.ptr)",
                path=path,
            )


def _contract(result: RenderResult, models: Models) -> Iterator[Finding]:
    kernel, text = result.kernel, result.text or ""
    if kernel is None:
        return
    if not kernel.def_kernel_calls:
        if profile(result.instance.profile).template_calls_def_kernel(result.instance.kind):
            path = str(result.instance.template)
            yield Finding(
                "KT209",
                rule("KT209").severity,
                line_range(models.get(path), 0),
                "the template never calls kernel.def_kernel, so there is no exported entry "
                "point; add {{kernel.def_kernel(inputs=[...], outputs=[...], names_str=...)}}",
                path=path,
            )
        return
    path, rng = _def_kernel_site(result, models)
    signature = kernel.signature_text()
    at = text.find(signature)
    bare = kernel.call_signature()
    if at < 0 and bare and text.find(bare) >= 0:
        yield _at_rendered_offset(
            result,
            models,
            text.find(bare),
            "KT401",
            "the entry is not PT_EXPORT: the library is built with -fvisibility=hidden, so "
            "Inductor (and kls bench) could not find it; in this profile def_kernel returns "
            "the signature without PT_EXPORT: write `PT_EXPORT {{kernel.def_kernel(...)}}`",
        )
        return
    if at < 0 or 'extern "C"' not in text[:at]:
        where = "is never emitted" if at < 0 else 'is not inside extern "C"'
        yield Finding(
            "KT401",
            rule("KT401").severity,
            rng,
            f"the def_kernel signature {where}; Inductor loads the entry by its C name, so "
            'print {{kernel.def_kernel(...)}} inside an extern "C" { ... } block',
            path=path,
        )
        return
    body = _function_body(text, at + len(signature))
    if body is None:
        return
    start, end = body
    query = WORKSPACE_QUERY.search(text, start, end)
    if query is None:
        yield Finding(
            "KT403",
            rule("KT403").severity,
            rng,
            "the entry never answers the workspace-size query (`if (workspace_size) { "
            "*workspace_size = ...; return 0; }`); callers ask it first",
            path=path,
        )
        return
    for pattern, what in ((NULL_CHECK, "a null check"), (LAUNCH, "a kernel launch")):
        early = pattern.search(text, start, query.start())
        if early is not None:
            yield _at_rendered_offset(
                result,
                models,
                early.start(),
                "KT402",
                f"{what} runs before the workspace-size query; callers query the workspace "
                "with null data pointers, so move `if (workspace_size) {...}` above it",
            )
            return


def _function_body(text: str, after: int) -> tuple[int, int] | None:
    open_at = text.find("{", after)
    if open_at < 0:
        return None
    depth = 0
    for brace in BRACES.finditer(text, open_at):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return open_at, brace.start()
    return open_at, len(text)


def _at_rendered_offset(
    result: RenderResult, models: Models, offset: int, code: str, message: str
) -> Finding:
    text = result.text or ""
    line = text.count("\n", 0, offset)
    origin = result.source_map.origin(line) if result.source_map else None
    return finding_at_origin(origin, models, result, code, message)


def finding_at_origin(
    origin: Origin | None,
    models: Models,
    result: RenderResult,
    code: str,
    message: str,
    severity: Severity | None = None,
) -> Finding:
    path = origin.path if origin else str(result.instance.template)
    line = origin.line if origin else 0
    return Finding(
        code,
        severity or rule(code).severity,
        line_range(models.get(path), line),
        message,
        path=path,
    )


def _at_word_start(text: str, at: int) -> bool:
    """Whether `\b` holds before text[at] (a word character): no word character precedes."""
    return at == 0 or WORD_CHAR.match(text, at - 1) is None


def _first_use(text: str, name: str) -> int | None:
    """The offset of the first use of macro `name` outside its own #define line."""
    for m in re.finditer(rf"{name}\b", text):
        if not _at_word_start(text, m.start()):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        if not re.match(rf"\s*#\s*(define|undef|ifdef|ifndef)\s+{name}\b", text[line_start:]):
            return m.start()
    return None


def _globals_missing(result: RenderResult, models: Models) -> Iterator[Finding]:
    """PT_EXPORT (or CUTLASS_CHECK) used but never defined: {{template.globals()}} missing."""
    text = result.text or ""
    for name in GLOBALS_MACROS:
        use = _first_use(text, name)
        if use is None or re.search(rf"#\s*define\s+{name}\b", text):
            continue
        what = "(def_kernel's signature prints it) " if name == "PT_EXPORT" else ""
        yield _at_rendered_offset(
            result,
            models,
            use,
            "KT404",
            f'{name} is used here {what}but nothing defines it, so nvcc will fail with "this '
            'declaration has no storage class or type specifier"; template.globals() defines '
            f"it: add {{{{template.globals().getvalue()}}}} near the top, after "
            "{{template.header().getvalue()}}",
        )


def _doubled_export(result: RenderResult, models: Models) -> Iterator[Finding]:
    text = result.text or ""
    m = DOUBLED_EXPORT.search(text)
    while m is not None and not _at_word_start(text, m.start()):
        m = DOUBLED_EXPORT.search(text, m.start() + 1)
    if m is None:
        return
    why = (
        "def_kernel's signature already starts with PT_EXPORT in this profile: remove the one "
        "written before {{kernel.def_kernel(...)}}"
        if profile(result.instance.profile).signature_exports
        else "write it once"
    )
    yield _at_rendered_offset(
        result, models, m.start(), "KT405", f"PT_EXPORT is written twice; {why}"
    )


def _redeclared_params(result: RenderResult, models: Models) -> Iterator[Finding]:
    """A C parameter the entry's body declares again at its outermost level (a redefinition
    nvcc rejects): the names this instance's rendered code really declares."""
    kernel, text = result.kernel, result.text or ""
    if kernel is None or not kernel.def_kernel_calls:
        return
    at = text.find(kernel.call_signature())
    body = _function_body(text, at + len(kernel.call_signature())) if at >= 0 else None
    if body is None:
        return
    start, end = body
    # Only the body is blanked (it opens right after the signature, outside any comment):
    # blanking the whole rendered text cost ~3 ms a check on a CUTLASS instance.
    outer = _outermost(_blank_comments(text[start : end + 1]), 1, end - start)
    params = kernel.params()
    # Cheap, one pass for all names: the full declaration pattern below backtracks over the
    # body, so it runs only for a name followed by = ; [ { ( (and not preceded by a word
    # character or `.`, checked outside the pattern, which then scans for its literals fast).
    named = "|".join(re.escape(p.name) for p in sorted(params, key=lambda p: -len(p.name)))
    followed = (
        {
            m.group(1)
            for m in re.finditer(rf"({named})\s*[=;\[{{(]", outer)
            if m.start() == 0 or NAME_OR_DOT.match(outer, m.start() - 1) is None
        }
        if params
        else set()
    )
    for param in params:
        if param.name not in followed:
            continue
        decl = re.compile(
            rf"(?<![\w.>:])([A-Za-z_][\w:]*(?:<[^;{{}}()]*>)?)[\s*&]+(?:const\s+)?[*&]*\s*"
            rf"{re.escape(param.name)}\s*(?:=|;|\[|\{{|\()"
        )
        for m in decl.finditer(outer):
            if m.group(1) in C_KEYWORDS:
                continue
            yield _at_rendered_offset(
                result,
                models,
                start + 1 + m.start(),
                "KT208",
                f"the entry's body declares '{param.name}' again, but '{param.name}' is already "
                "a parameter of the signature (def_kernel's names_str); rename one of them",
            )
            break


COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)


def _blank_comments(text: str) -> str:
    """Comments and string literals as spaces (offsets and newlines kept)."""
    return COMMENT_OR_STRING.sub(_spaces, text)


def _spaces(m: re.Match[str]) -> str:
    found = m.group()
    return NOT_NEWLINE.sub(" ", found) if "\n" in found else " " * len(found)


NESTED = re.compile(r"[^\n}]")  # what blanking a nested region replaces
NOT_NEWLINE = re.compile(r"[^\n]")


def _outermost(text: str, start: int, end: int) -> str:
    """text[start:end] with every nested {...} blanked to spaces (offsets kept): inside
    braces, everything but newlines and `}` becomes a space, the opening `{` included."""
    segment = text[start:end]
    out: list[str] = []
    depth = 0
    at = 0  # where the text not yet copied starts
    for m in BRACES.finditer(segment):
        i = m.start()
        if segment[i] == "{":
            depth += 1
            if depth == 1:  # a nested region starts here
                out.append(segment[at:i])
                at = i
        else:
            depth -= 1
            if depth == 0:  # and ends here, before this `}`
                out.append(NESTED.sub(" ", segment[at:i]))
                at = i
    out.append(NESTED.sub(" ", segment[at:]) if depth > 0 else segment[at:])
    return "".join(out)
