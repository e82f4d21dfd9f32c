"""Triton templates (`.py.jinja`, profile `triton`) in the editor: hover of a helper call with
what it rendered to, completion of helpers, buffers and config names, go to definition from a
buffer name to its kls.toml tensor, and the inlay hint of the last Triton compile (registers,
shared memory, spills) at `def_kernel`.

A Triton template's helpers are plain names (`{{size("A", 0)}}`), its buffers the string names
`def_kernel` lists, bound in order to the instance's input tensors (kls.toml's order, the
output `out` last). Renders and compiles run in the torch worker; what is read here is their
last result, and anything that walks it runs off the event loop.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from kls.checks.triton_static import bound_buffers
from kls.compile import CompileResult
from kls.instances import InstanceSpec
from kls.instances.locate import instance_key_range
from kls.instances.schema import TensorSpec
from kls.lsp.convert import end_of_line_hint, to_lsp_range
from kls.lsp.offload import off_loop
from kls.lsp.preview import PYTHON_TEMPLATES
from kls.lsp.state import KlsServer
from kls.positions import Position
from kls.profiles import profile
from kls.profiles.triton import HELPERS
from kls.profiles.triton.helpers import HELPER_DOCS
from kls.render import RenderResult
from kls.template.model import HelperCall, TemplateModel

# Helpers whose first argument names a buffer.
BUFFER_HELPERS = ("size", "stride", "load_input", "make_load")
HOVER_LINES = 40  # rendered lines shown in a hover, at most
DEFAULT_SHARED_LIMIT = 232448  # an H200's shared memory per block (opt-in)
_BUFFER_ARG = re.compile(r"\b(?:" + "|".join(BUFFER_HELPERS) + r")\(\s*([\"'])(\w*)$")
_WORD = re.compile(r"\w*$")


def is_triton(ls: KlsServer, uri: str) -> bool:
    """Whether `uri` is a Triton template: its active instance's profile renders Python, or,
    with no instance, its name ends `.py.jinja`/`.py.j2`."""
    path = ls.path(uri)
    spec = ls.active_instance(path)
    if spec is not None:
        try:
            return profile(spec.profile).language == "python"
        except KeyError:
            return False
    return str(path).endswith(PYTHON_TEMPLATES)


# -- the instance's buffers as the template names them ---------------------------------------


@dataclass(frozen=True)
class Buffer:
    """A name the template uses for a buffer and the tensor behind it."""

    name: str  # as def_kernel (or `None`, the output) names it
    tensor: str | None  # the tensor's key in kls.toml; None: Inductor's lowering makes it
    spec: TensorSpec

    def describe(self, instance: str) -> str:
        if self.tensor is None:
            return f"made by Inductor's lowering for instance `{instance}`"
        return f"tensor `{self.tensor}` of instance `{instance}` (kls.toml)"


def buffers(model: TemplateModel, instance: InstanceSpec) -> dict[str, Buffer]:
    """The buffer names the template uses, each with its tensor (checks.triton_static's
    binding) and that tensor's key in kls.toml, where it has one."""
    keys = {id(s): n for n, s in instance.tensors.items() if s is not None}
    named = {n.lower(): n for n, s in instance.tensors.items() if s is not None}
    return {  # a tensor the static view reshapes (flex decode's Q) is still kls.toml's own
        name: Buffer(name, keys.get(id(spec)) or named.get(name.lower()), spec)
        for name, spec in bound_buffers(model, instance).items()
    }


def _string(text: str) -> str | None:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return "None" if text in ("None", "none") else None


def helper_at(model: TemplateModel, pos: Position) -> HelperCall | None:
    """The innermost Triton helper call whose range holds `pos`."""
    best: HelperCall | None = None
    for call in model.bare_calls(HELPERS):
        if call.range.contains(pos) and (best is None or best.range.start <= call.range.start):
            best = call
    return best


def buffer_name_at(model: TemplateModel, pos: Position) -> tuple[str, HelperCall] | None:
    """The buffer name under `pos`: a string argument of def_kernel, or the first argument of
    size/stride/load_input/make_load."""
    call = helper_at(model, pos)
    if call is None or call.helper not in (*BUFFER_HELPERS, "def_kernel"):
        return None
    args = call.positional() if call.helper == "def_kernel" else call.positional()[:1]
    for arg in args:
        if arg.value_range.contains(pos):
            name = _string(arg.value_text)
            return (name, call) if name is not None else None
    return None


# -- hover ---------------------------------------------------------------------------------------


def rendered_lines(result: RenderResult | None, path: Path, first: int, last: int) -> list[str]:
    """The module lines the render's source map gives to template lines first..last of `path`."""
    if result is None or result.text is None or result.source_map is None:
        return []
    module = result.text.split("\n")
    wanted = str(path.resolve())
    out: list[str] = []
    for i, origin in enumerate(result.source_map.origins):
        if origin is None or not first <= origin.line <= last or i >= len(module):
            continue
        if origin.path == wanted or str(Path(origin.path).resolve()) == wanted:
            out.append(module[i])
    return out


def hover_text(
    model: TemplateModel,
    pos: Position,
    result: RenderResult | None,
    instance: InstanceSpec | None,
    path: Path,
) -> tuple[str, HelperCall] | None:
    """What a hover at `pos` shows, and the call it is about: the helper, the buffer under the
    cursor, and the lines the call rendered to for the active instance (or why there are
    none). None off a helper call."""
    call = helper_at(model, pos)
    if call is None:
        return None
    parts: list[str] = []
    doc = HELPER_DOCS.get(call.helper)
    parts.append(f"**{call.helper}** (Inductor template helper)" + (f": {doc[0]}" if doc else ""))
    named = buffer_name_at(model, pos)
    if named is not None and instance is not None:
        found = buffers(model, instance).get(named[0])
        parts.append(
            f"`{named[0]}` is {found.describe(instance.name)}: `{found.spec.describe()}`"
            if found is not None
            else f"`{named[0]}` is no buffer of instance `{instance.name}` (def_kernel's "
            "names, in order, are its input tensors in kls.toml)"
        )
    if instance is None:
        parts.append("No instance in kls.toml reads this template: nothing rendered.")
        return "\n\n".join(parts), call
    lines = rendered_lines(result, path, call.range.start.line, call.range.end.line)
    if lines:
        shown = _dedent(lines[:HOVER_LINES])
        more = f"\n\n… {len(lines) - HOVER_LINES} more lines" if len(lines) > HOVER_LINES else ""
        parts.append(
            f"Renders to (instance `{instance.name}`, {len(lines)} line"
            f"{'s' if len(lines) != 1 else ''}):\n```python\n{shown}\n```{more}"
        )
    elif result is not None and result.text is None:
        why = "; ".join(f.message for f in result.findings)[:400] or "it does not render"
        parts.append(f"Instance `{instance.name}` has no render: {why}")
    return "\n\n".join(parts), call


def _dedent(lines: list[str]) -> str:
    indent = min((len(s) - len(s.lstrip()) for s in lines if s.strip()), default=0)
    return "\n".join(s[indent:] for s in lines)


async def hover(ls: KlsServer, uri: str, position: lsp.Position) -> lsp.Hover | None:
    """The hover of a helper call, from the latest render of the active instance (the last
    check's when current); the template is walked off the event loop."""
    model = await ls.model(uri)
    path = ls.path(uri)
    instance = ls.active_instance(path)
    result = await ls.active_render(uri) if instance is not None else None
    pos = Position(position.line, position.character)
    found = await off_loop(hover_text, model, pos, result, instance, path)
    if found is None:
        return None
    return lsp.Hover(
        contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=found[0]),
        range=to_lsp_range(found[1].range),
    )


# -- completion ---------------------------------------------------------------------------------


def in_jinja_code(prefix: str) -> bool:
    """Whether the text before the cursor (its line) ends inside `{{ ... ` or `{% ... `."""
    opened = max(prefix.rfind("{{"), prefix.rfind("{%"))
    closed = max(prefix.rfind("}}"), prefix.rfind("%}"))
    return opened >= 0 and opened > closed


def completions(
    model: TemplateModel, line_text: str, column: int, instance: InstanceSpec | None
) -> list[lsp.CompletionItem]:
    """Buffer names inside a helper's quotes; helper and config names in Jinja code; config
    names (the kernel's constexprs) in the Python around it."""
    prefix = line_text[:column]
    quoted = _BUFFER_ARG.search(prefix)
    if quoted is not None:
        if instance is None:
            return []
        return [
            lsp.CompletionItem(
                label=b.name,
                kind=lsp.CompletionItemKind.Variable,
                detail=f"{b.tensor or b.name}: {b.spec.describe()}",
                documentation=b.describe(instance.name),
            )
            for b in buffers(model, instance).values()
            if b.name != "None"
        ]
    items: list[lsp.CompletionItem] = []
    if in_jinja_code(prefix):
        for name in sorted(HELPERS):
            doc = HELPER_DOCS.get(name)
            items.append(
                lsp.CompletionItem(
                    label=name,
                    kind=lsp.CompletionItemKind.Function,
                    detail="Inductor template helper",
                    documentation=doc[0] if doc else None,
                )
            )
    elif not _WORD.search(prefix).group(0):  # type: ignore[union-attr]
        return []  # Python code, no word begun: the Python extension's business
    for name, value in (instance.variables if instance else {}).items():
        items.append(
            lsp.CompletionItem(
                label=name,
                kind=lsp.CompletionItemKind.Constant,
                detail=f"= {value!r} (instance {instance.name if instance else ''})",
            )
        )
    return items


async def completion(ls: KlsServer, params: lsp.CompletionParams) -> lsp.CompletionList:
    uri = params.text_document.uri
    text = ls.text(uri)
    model = await ls.model(uri)
    lines = text.split("\n")
    line = lines[params.position.line] if params.position.line < len(lines) else ""
    instance = ls.active_instance(ls.path(uri))
    items = await off_loop(completions, model, line, params.position.character, instance)
    return lsp.CompletionList(is_incomplete=False, items=items)


# -- go to definition ---------------------------------------------------------------------------


def tensor_location(instance: InstanceSpec, tensor: str, config_text: str) -> lsp.Location:
    """Where kls.toml declares `tensor` of `instance`."""
    path = instance.config_path
    found = instance_key_range(path, config_text, instance.name, "tensors", tensor)
    return lsp.Location(uri=instance.config_path.resolve().as_uri(), range=to_lsp_range(found))


def buffer_tensor(model: TemplateModel, pos: Position, instance: InstanceSpec) -> str | None:
    """The kls.toml tensor behind the buffer name under `pos`."""
    named = buffer_name_at(model, pos)
    found = buffers(model, instance).get(named[0]) if named is not None else None
    return found.tensor if found is not None else None


async def definition(ls: KlsServer, uri: str, position: lsp.Position) -> lsp.Location | None:
    model = await ls.model(uri)
    instance = ls.active_instance(ls.path(uri))
    if instance is None:
        return None
    pos = Position(position.line, position.character)
    tensor = await off_loop(buffer_tensor, model, pos, instance)
    if tensor is None:
        return None
    config = instance.config_path.resolve()
    opened = [u for u in ls.docs if ls.path(u) == config]
    if opened:
        text = ls.text(opened[0])
    else:
        text = await off_loop(config.read_text, encoding="utf-8")
    return await off_loop(tensor_location, instance, tensor, text)


# -- the last Triton compile: the inlay hint ----------------------------------------------------


@dataclass(frozen=True)
class TritonCompile:
    """The last Triton compile of one instance: Triton's figures and listings, and the render
    that was compiled (its source map takes a module line back to the template)."""

    instance: InstanceSpec
    figures: dict[str, Any]
    rendered: RenderResult | None


_COMPILES: weakref.WeakKeyDictionary[KlsServer, dict[tuple[str, str], TritonCompile]] = (
    weakref.WeakKeyDictionary()
)


def remember_compile(ls: KlsServer, spec: InstanceSpec, result: CompileResult) -> None:
    """Keep a Triton compile's figures for the hint and the PTX / SASS view, and ask the client
    to redraw its hints."""
    if result.triton is None or result.triton.get("error"):
        return
    keep_compile(ls, spec, result.triton, result.rendered)


def keep_compile(
    ls: KlsServer, spec: InstanceSpec, figures: dict[str, Any], rendered: RenderResult | None
) -> TritonCompile:
    """Keep Triton's figures of `spec` as its last compile; redraw the client's hints."""
    compiled = TritonCompile(spec, figures, rendered)
    _COMPILES.setdefault(ls, {})[(str(spec.template.resolve()), spec.name)] = compiled
    workspace = ls.client_capabilities.workspace
    hints = workspace.inlay_hint if workspace else None
    if hints is not None and hints.refresh_support:
        ls.workspace_inlay_hint_refresh(None)
    return compiled


def last_compile(ls: KlsServer, path: Path, instance: str) -> TritonCompile | None:
    return _COMPILES.get(ls, {}).get((str(path.resolve()), instance))


def resource_label(compiled: TritonCompile) -> str:
    """`sm_90: 58 registers · 24.0 KiB shared of 227.0 KiB · no spills`, from Triton's
    figures and the instance's device model."""
    spec, figures = compiled.instance, compiled.figures
    limit = int(spec.device.get("shared_memory_per_block", DEFAULT_SHARED_LIMIT))
    shared = int(figures.get("shared") or 0)
    spills = [f"{k} {figures.get(k)} B" for k in ("stack", "local") if (figures.get(k) or 0) > 0]
    return (
        f"sm_{spec.device.get('cc', 90)}: {figures.get('registers')} registers · "
        f"{shared / 1024:.1f} KiB shared of {limit / 1024:.1f} KiB"
        + (" (over the limit)" if shared > limit else "")
        + (f" · spills: {', '.join(spills)}" if spills else " · no spills")
    )


def def_kernel_lines(model: TemplateModel) -> list[int]:
    return sorted({rng.end.line for rng in model.kernel_declarations()})


async def inlay_hints(ls: KlsServer, uri: str) -> list[lsp.InlayHint]:
    """The last compile's figures after the active instance's `def_kernel` line."""
    path = ls.path(uri)
    spec = ls.active_instance(path)
    compiled = last_compile(ls, path, spec.name) if spec is not None else None
    if compiled is None:
        return []
    model = await ls.model(uri)
    label = resource_label(compiled)
    lines = await off_loop(def_kernel_lines, model)
    return [end_of_line_hint(n, model.index.line_text(n), label) for n in lines]
