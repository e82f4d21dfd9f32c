"""kls.toml open in the editor: it is a config, not a template. Its diagnostics are the
config's own (KlsServer.publish_config), and inside an instance's `op = "..."` the editor
completes the ops that instance's profile would accept for its tensors, arch and level.

The op list (kls.profiles.op_list) takes about a second to build at level "0" and seconds at
"2222"; it is built off the event loop when the file opens or changes, and kept in memory, so
a completion is a filter over it (well under a millisecond). A completion asked before the
list is ready answers with what there is, marked incomplete, and the client asks again.
"""

from __future__ import annotations

import asyncio
import re

from lsprotocol import types as lsp

from kls.instances import InstanceSpec, load_instances
from kls.lsp.offload import off_loop
from kls.lsp.state import KlsServer
from kls.profiles import ConfigProblem
from kls.profiles.op_list import OpList, op_list, remembered

CONFIG_NAMES = ("kls.toml",)
_TABLE = re.compile(r"^\s*\[\s*instances\.(?:\"([^\"]+)\"|([A-Za-z0-9_\-]+))\s*\]")
_OP_VALUE = re.compile(r'^\s*op\s*=\s*"([^"]*)$')
MAX_ITEMS = 200


def handles(ls: KlsServer, uri: str) -> bool:
    return ls.path(uri).name in CONFIG_NAMES


def instance_at(lines: list[str], line: int) -> str | None:
    """The instance whose table holds `line` (`[instances.NAME]` above it)."""
    for i in range(min(line, len(lines) - 1), -1, -1):
        found = _TABLE.match(lines[i])
        if found:
            return found.group(1) or found.group(2)
        if lines[i].lstrip().startswith("[") and i != line:
            return None  # another table (defaults, a sub-table of another instance)
    return None


def _specs(ls: KlsServer, uri: str, text: str | None = None) -> dict[str, InstanceSpec]:
    settings = ls.settings
    loaded = load_instances(
        ls.path(uri), text or ls.text(uri), settings.extra_roots, settings.workspace_trusted
    )
    return loaded.instances


def _build(spec: InstanceSpec) -> OpList | None:
    try:
        return op_list(spec)
    except ConfigProblem:  # the instance's profile has no op list
        return None
    except Exception:  # an instance whose op list cannot be made now (a typo being fixed)
        return None


def warm(ls: KlsServer, uri: str, only: InstanceSpec | None = None) -> None:
    """Build op lists off the loop: of `only`, or of every GEMM instance of the config (one
    task at a time; the list of an instance being typed may come first)."""

    async def run() -> None:
        try:
            specs = [only] if only is not None else list((await off_loop(_specs, ls, uri)).values())
        except Exception:
            return
        for spec in specs:
            if spec.kind == "cutlass_gemm" and remembered(spec) is None:
                await off_loop(_build, spec)

    task = getattr(ls, "_op_warm", None)
    if task is None or task.done() or only is not None:
        ls._op_warm = asyncio.get_running_loop().create_task(run())  # type: ignore[attr-defined]


async def completion(ls: KlsServer, params: lsp.CompletionParams) -> lsp.CompletionList:
    uri = params.text_document.uri
    lines = ls.text(uri).split("\n")
    row = params.position.line
    text = lines[row][: params.position.character] if row < len(lines) else ""
    typed = _OP_VALUE.match(text)
    name = instance_at(lines, row) if typed else None
    if typed is None or name is None:
        return lsp.CompletionList(is_incomplete=False, items=[])
    # The line being typed is read as `op = "<typed>"`: an open quote would make it no TOML.
    prefix = typed.group(1)
    closed = [*lines[:row], f'op = "{prefix}"', *lines[row + 1 :]]
    specs = await off_loop(_specs, ls, uri, "\n".join(closed))
    spec = specs.get(name)
    if spec is None or spec.kind != "cutlass_gemm":
        return lsp.CompletionList(is_incomplete=False, items=[])
    found = remembered(spec)
    if found is None:
        warm(ls, uri, spec)
        return lsp.CompletionList(is_incomplete=True, items=[])
    start = lsp.Position(row, params.position.character - len(prefix))
    items = []
    for choice in found.accepted:
        if prefix in choice.op:
            items.append(
                lsp.CompletionItem(
                    label=choice.op,
                    kind=lsp.CompletionItemKind.Value,
                    detail=f"{choice.tile}, {choice.family}",
                    text_edit=lsp.TextEdit(lsp.Range(start, params.position), choice.op),
                )
            )
            if len(items) >= MAX_ITEMS:
                break
    return lsp.CompletionList(is_incomplete=len(items) >= MAX_ITEMS, items=items)
