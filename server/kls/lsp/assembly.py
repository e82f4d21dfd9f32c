"""The PTX / SASS view of a Triton template's compiled instance, beside its preview.

`kls.assembly [uri, kind?, line?]` compiles the active instance with Triton (the editor's
compile: cached by content, so after a save it costs a cache read) and answers the PTX or the
SASS (nvdisasm's listing of the cubin, made in the torch worker only when the SASS is asked
for: it takes about 0.4 s) with the listing lines of one line: a template line when `uri` is
the template, a module line when it is the preview (`kls-preview:...py`). The listing is also
a virtual document,
`kls-preview:/abs/t.py.jinja.ptx?instance=NAME` (or `.sass`), served through
`workspace/textDocumentContent` like the preview.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from pygls.exceptions import JsonRpcInvalidParams

from kls.compile.listing import module_lines
from kls.compile.triton import compile_triton
from kls.lsp import preview, triton
from kls.lsp.compile import compile_active
from kls.lsp.offload import off_loop
from kls.lsp.protocol import ASSEMBLY_COMMAND, AssemblyAnswer
from kls.lsp.protocol import AssemblyKind as ListingKind
from kls.lsp.state import NO_SETTINGS, NO_TORCH_UNTRUSTED, PREVIEW_SCHEME, KlsServer
from kls.profiles import profile

KINDS: tuple[ListingKind, ...] = ("ptx", "sass")
NOT_TRITON = (
    "the PTX / SASS view is for Triton templates (profile triton); a CUDA template's compile "
    "is kls.compile"
)


def assembly_uri(template: Path, instance: str, kind: ListingKind) -> str:
    return f"{PREVIEW_SCHEME}:{quote(str(template))}.{kind}?instance={quote(instance)}"


def parse_assembly_uri(uri: str) -> tuple[Path, str | None, ListingKind] | None:
    """(template, instance, kind) of an assembly URI; None for any other URI."""
    parsed = preview.parse_preview_uri(uri)
    if parsed is None:
        return None
    path, instance = parsed
    for kind in KINDS:
        if path.name.endswith(f".{kind}"):
            return Path(str(path)[: -len(kind) - 1]), instance, kind
    return None


def arguments(args: tuple[Any, ...]) -> tuple[str, ListingKind, int | None]:
    """`[uri]`, `[uri, kind]` or `[uri, kind, line]`."""
    if not args or not isinstance(args[0], str) or len(args) > 3:
        raise JsonRpcInvalidParams(f"{ASSEMBLY_COMMAND} takes arguments [uri, kind?, line?]")
    kind = args[1] if len(args) > 1 and args[1] is not None else "ptx"
    if kind not in KINDS:
        raise JsonRpcInvalidParams(f"{ASSEMBLY_COMMAND}: kind is 'ptx' or 'sass'")
    line = args[2] if len(args) > 2 else None
    if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 0):
        raise JsonRpcInvalidParams(f"{ASSEMBLY_COMMAND}: line is a 0-based line number")
    return args[0], kind, line


def listing_lines(
    compiled: triton.TritonCompile,
    kind: ListingKind,
    template: Path,
    line: int | None,
    module_line: bool,
) -> list[int]:
    """The listing lines (0-based) of the instructions of `line`: a module line, or a template
    line through the render's source map (every module line it made)."""
    if line is None:
        return []
    by_module = module_lines(str(compiled.figures.get(kind) or ""), kind)
    if module_line:
        wanted = [line]
    else:
        rendered = compiled.rendered
        origins = rendered.source_map.origins if rendered and rendered.source_map else []
        path = str(template.resolve())
        wanted = [
            i
            for i, o in enumerate(origins)
            if o is not None and o.line == line and str(Path(o.path).resolve()) == path
        ]
    return sorted({n for m in wanted for n in by_module.get(m, [])})


async def assembly(
    ls: KlsServer,
    uri: str,
    kind: ListingKind,
    line: int | None = None,
    instance: str | None = None,
) -> AssemblyAnswer:
    """The listing of the active (or named) instance of the template `uri` is or previews."""
    from_preview = preview.parse_preview_uri(uri)
    template_uri = from_preview[0].as_uri() if from_preview else uri
    instance = instance or (from_preview[1] if from_preview else None)
    path = ls.path(template_uri)
    await ls.load_config(path)
    spec = ls.active_instance(path)
    if instance is not None:
        spec = next((s for s in ls.instances_of(path) if s.name == instance), None)
    if spec is None:
        return {"ok": False, "error": preview.NO_INSTANCE}
    if profile(spec.profile).language != "python":
        return {"ok": False, "instance": spec.name, "error": NOT_TRITON}
    if not await ls.wait_for_settings():
        return {"ok": False, "instance": spec.name, "error": NO_SETTINGS}
    if not ls.settings.workspace_trusted:
        return {"ok": False, "instance": spec.name, "error": NO_TORCH_UNTRUSTED}
    answer = await compile_active(ls, template_uri, "check", spec)
    compiled = triton.last_compile(ls, path, spec.name)
    if kind == "sass" and compiled is not None and not compiled.figures.get("sass"):
        # The SASS listing (nvdisasm, ~0.4 s) is made only when asked for: compile again with
        # it (the render and Triton's own compile come from their caches).
        found = await off_loop(compile_triton, spec, ls.overrides(), True)
        if found[3].get("sass"):
            compiled = triton.keep_compile(ls, spec, found[3], found[2])
    if compiled is None or not compiled.figures.get(kind):
        why = answer.get("error") or "Triton's compile failed (see the diagnostics)"
        return {"ok": False, "instance": spec.name, "kind": kind, "error": str(why)}
    text = str(compiled.figures[kind])
    lines = await off_loop(listing_lines, compiled, kind, path, line, from_preview is not None)
    return {
        "ok": True,
        "instance": spec.name,
        "kind": kind,
        "uri": assembly_uri(path, spec.name, kind),
        "text": text,
        "lines": lines,
    }


# -- handlers ---------------------------------------------------------------------------------


async def assembly_command(ls: KlsServer, *args: Any) -> AssemblyAnswer:
    uri, kind, line = arguments(args)
    return await assembly(ls, uri, kind, line)


async def assembly_content(ls: KlsServer, uri: str) -> str | None:
    """The text of an assembly URI (None for any other URI: the preview serves it)."""
    parsed = parse_assembly_uri(uri)
    if parsed is None:
        return None
    template, instance, kind = parsed
    answer = await assembly(ls, template.as_uri(), kind, instance=instance)
    return answer.get("text") or f"// kls: {answer.get('error', 'no listing')}\n"


def register(ls: KlsServer) -> None:
    ls.command(ASSEMBLY_COMMAND)(assembly_command)
    preview.CONTENT_PROVIDERS.append(assembly_content)
