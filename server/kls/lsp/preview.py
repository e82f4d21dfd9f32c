"""Preview documents: the rendered CUDA of a template's active instance, addressed by URI.

`kls-preview:/abs/path/t.cu.jinja?instance=NAME` is served through LSP 3.18
`workspace/textDocumentContent` (advertised by hand: pygls 2.1 does not) and through the custom
`kls/preview` request for clients without it.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse

SCHEME = "kls-preview"


def preview_uri(template: Path, instance: str) -> str:
    return f"{SCHEME}:{quote(str(template))}.cu?instance={quote(instance)}"


def parse_preview_uri(uri: str) -> tuple[Path, str | None] | None:
    parsed = urlparse(uri)
    if parsed.scheme != SCHEME:
        return None
    path = unquote(parsed.path).removesuffix(".cu")
    instance = parse_qs(parsed.query).get("instance", [None])[0]
    return Path(path), instance
