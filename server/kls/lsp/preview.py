"""Preview documents: the rendered CUDA of a template's active instance, addressed by URI, and
the choice of that instance.

`kls-preview:/abs/path/t.cu.jinja.cu?instance=NAME` is served through LSP 3.18
`workspace/textDocumentContent` (advertised by hand: pygls 2.1 does not) and through the custom
`kls/preview` request for clients without it. Renders run in the sandbox's worker processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlparse

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from kls.lsp.offload import off_loop
from kls.lsp.protocol import (
    PREVIEW_COMMAND,
    PREVIEW_REQUEST,
    SELECT_INSTANCE_COMMAND,
    PreviewAnswer,
    SelectInstanceAnswer,
    param,
    uri_and_name,
)
from kls.lsp.state import PREVIEW_SCHEME, KlsServer
from kls.sandbox.workers import render_isolated

SCHEME = PREVIEW_SCHEME
NO_INSTANCE = "no instance declares this template in kls.toml"
# Other documents under the preview scheme (kls.lsp.assembly's PTX / SASS): each gives the
# text of a URI it serves, or None.
ContentProvider = Callable[[KlsServer, str], Awaitable[str | None]]
CONTENT_PROVIDERS: list[ContentProvider] = []


PYTHON_TEMPLATES = (".py.jinja", ".py.j2")


def rendered_suffix(template: str) -> str:
    """What the rendered text is, for the editor's highlighting: a Triton module or CUDA."""
    return ".py" if template.endswith(PYTHON_TEMPLATES) else ".cu"


def preview_uri(template: Path, instance: str) -> str:
    suffix = rendered_suffix(str(template))
    return f"{SCHEME}:{quote(str(template))}{suffix}?instance={quote(instance)}"


def parse_preview_uri(uri: str) -> tuple[Path, str | None] | None:
    parsed = urlparse(uri)
    if parsed.scheme != SCHEME:
        return None
    path = unquote(parsed.path)
    for suffix in (".py", ".cu"):
        if path.endswith(suffix) and rendered_suffix(path[: -len(suffix)]) == suffix:
            path = path[: -len(suffix)]
            break
    instance = parse_qs(parsed.query).get("instance", [None])[0]
    return Path(path), instance


async def preview(
    ls: KlsServer, uri: str, instance: str | None = None, select: bool = True
) -> PreviewAnswer:
    """The rendered CUDA of `instance` (or the active one); `select` makes it active."""
    path = ls.path(uri)
    await ls.load_config(path)
    if instance and select:
        ls.active[str(path)] = instance
    spec = ls.active_instance(path)
    if instance and not select:
        spec = next((s for s in ls.instances_of(path) if s.name == instance), None)
    if spec is None:
        return {"instance": None, "text": None, "uri": None, "error": NO_INSTANCE}
    result = await off_loop(render_isolated, spec, ls.overrides())
    error = None if result.ok else "; ".join(f.message for f in result.findings)
    return {
        "instance": spec.name,
        "text": result.text,
        "error": error,
        "uri": preview_uri(path, spec.name),
    }


def refresh_previews(ls: KlsServer, uri: str, first: bool) -> None:
    """After the first check of a new text: ask the client to re-read open previews of
    instances that read it."""
    if not first or not ls.previews or not ls.supports_content_refresh():
        return
    changed = ls.path(uri)
    readers = {s.template.resolve() for s in ls.instances_of(changed)}
    for preview in list(ls.previews):
        parsed = parse_preview_uri(preview)
        if parsed is None:
            continue
        template = parsed[0].resolve()
        if template == changed or template in readers:
            ls.workspace_text_document_content_refresh(
                lsp.TextDocumentContentRefreshParams(uri=preview), None
            )


# -- handlers ---------------------------------------------------------------------------------


async def document_content(
    ls: KlsServer, params: lsp.TextDocumentContentParams
) -> lsp.TextDocumentContentResult:
    for provider in CONTENT_PROVIDERS:
        served = await provider(ls, params.uri)
        if served is not None:
            return lsp.TextDocumentContentResult(text=served)
    parsed = parse_preview_uri(params.uri)
    if parsed is None:
        raise JsonRpcInvalidParams(f"kls serves only {SCHEME}: documents")
    template, instance = parsed
    ls.previews.add(params.uri)
    answer = await preview(ls, template.as_uri(), instance, select=False)
    text = answer["text"] if answer["text"] is not None else f"// {answer['error']}\n"
    return lsp.TextDocumentContentResult(text=text)


async def preview_request(ls: KlsServer, params: Any) -> PreviewAnswer:
    uri = param(params, "uri")
    instance = param(params, "instance")
    if not isinstance(uri, str) or not (instance is None or isinstance(instance, str)):
        raise JsonRpcInvalidParams(f"{PREVIEW_REQUEST} needs {{uri: string, instance?: string}}")
    return await preview(ls, uri, instance)


async def preview_command(ls: KlsServer, *args: Any) -> PreviewAnswer:
    uri, instance = uri_and_name(args, PREVIEW_COMMAND)
    return await preview(ls, uri, instance)


async def select_instance(ls: KlsServer, *args: Any) -> SelectInstanceAnswer:
    uri, name = uri_and_name(args, SELECT_INSTANCE_COMMAND)
    path = ls.path(uri)
    await ls.load_config(path)
    names = [s.name for s in ls.instances_of(path)]
    if name is not None:
        if name not in names:
            return {"ok": False, "instances": names, "error": f"no instance '{name}'"}
        ls.active[str(path)] = name
        ls.refresh_lenses()
    return {
        "ok": True,
        "active": ls.active.get(str(path), names[0] if names else None),
        "instances": names,
    }


def register(ls: KlsServer) -> None:
    ls.feature(lsp.WORKSPACE_TEXT_DOCUMENT_CONTENT)(document_content)
    ls.feature(PREVIEW_REQUEST)(preview_request)
    ls.command(PREVIEW_COMMAND)(preview_command)
    ls.command(SELECT_INSTANCE_COMMAND)(select_instance)
    ls.after_check.append(refresh_previews)
