"""kls.toml in the editor: inside an instance's `op = "..."`, the ops its profile accepts for
its tensors, arch and level; kls.toml itself is not checked as a template."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types as lsp

from kls.instances import load_instances
from kls.profiles import profile
from tests.lsp.harness import Harness


async def _complete(harness: Harness, uri: str, line: int, column: int) -> dict:  # type: ignore[type-arg]
    for _ in range(300):  # the op list is built off the loop when the file opens
        found = await harness.request(
            lsp.TEXT_DOCUMENT_COMPLETION,
            {"textDocument": {"uri": uri}, "position": {"line": line, "character": column}},
        )
        if not found["isIncomplete"] or found["items"]:
            return found  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)
    raise AssertionError("the op list never arrived")


async def test_op_names_complete_from_the_instances_own_list(
    lsp_harness: Harness, workspace: Path
) -> None:
    config = workspace / "kls.toml"
    text = config.read_text()
    lines = text.split("\n")
    table = lines.index("[instances.sm90_bf16_4096]")
    row = next(i for i in range(table, len(lines)) if lines[i].startswith("op = "))
    typed = 'op = "cutlass3x_sm90_tensorop_gemm_bf16'
    lines[row] = typed
    edited = "\n".join(lines)
    uri = lsp_harness.open(config.as_uri(), edited, language_id="toml")
    found = await _complete(lsp_harness, uri, row, len(typed))
    labels = [item["label"] for item in found["items"]]
    spec = load_instances(config).instances["sm90_bf16_4096"]
    accepted = {c.op for c in profile(spec.profile).compatible_ops(spec)}
    assert labels and set(labels) <= accepted  # only ops Inductor would take for bf16 X, W
    assert all(label.startswith("cutlass3x_sm90_tensorop_gemm_bf16") for label in labels)
    edit = found["items"][0]["textEdit"]
    assert edit["range"]["start"] == {"line": row, "character": len('op = "')}
    # elsewhere in kls.toml: nothing, and no template diagnostics for kls.toml itself
    other = await lsp_harness.request(
        lsp.TEXT_DOCUMENT_COMPLETION,
        {"textDocument": {"uri": uri}, "position": {"line": table, "character": 1}},
    )
    assert other["items"] == []
    template_checks = [
        d
        for params in lsp_harness.published
        if params["uri"] == uri
        for d in params["diagnostics"]
        if str(d.get("code", "")).startswith(("KT1", "KT2", "KT3", "KT5"))
    ]
    assert template_checks == []
