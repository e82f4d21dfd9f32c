"""The clients' capabilities every language-server test starts with: VS Code and Neovim as
pytest-lsp records them, and an LSP 3.18 client (VS Code's capabilities plus
workspace.textDocumentContent, which no recorded client has yet)."""

from __future__ import annotations

import functools
from typing import Any

from cattrs import Converter
from lsprotocol import types as lsp
from pygls.protocol import default_converter
from pytest_lsp import client_capabilities

CLIENTS = ["visual-studio-code", "neovim", "lsp-3.18"]


@functools.cache
def _recorded(name: str) -> dict[str, Any]:
    caps = client_capabilities("visual-studio-code" if name == "lsp-3.18" else name)
    if name == "lsp-3.18":
        assert caps.workspace is not None
        caps.workspace.text_document_content = lsp.TextDocumentContentClientCapabilities()
    return default_converter().unstructure(caps)  # type: ignore[no-any-return]


def capabilities(name: str, converter: Converter | None = None) -> lsp.ClientCapabilities:
    """One of CLIENTS' capabilities, structured by `converter` (the in-process harness passes
    its own, so cattrs generates its code once)."""
    return (converter or default_converter()).structure(_recorded(name), lsp.ClientCapabilities)
