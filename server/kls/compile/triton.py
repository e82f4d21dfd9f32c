"""Triton's compile of a rendered Triton module, for the instance's target, without a GPU:
the counterpart of nvcc's check mode for the triton profile. It runs in the torch worker
(the module imports Inductor's runtime), is cached by content, and reports
- Triton's compile errors at the template line that produced the failing module line (KT861);
- shared memory above the device model's per-block limit, the "out of resource" Inductor's
  autotuner would hit on the GPU (KT862);
- register spills: stack or local memory above 0 in the cubin (KT863);
- what it used (KT860, info): registers, shared memory against the limit.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from kls.cache_dir import cache_dir, write_atomic
from kls.checks.rendered import line_range, render_findings
from kls.checks.run import ModelCache
from kls.findings import Finding, Severity
from kls.instances import InstanceSpec
from kls.profiles.triton.client import WorkerUnavailable, shared_worker
from kls.render import RenderResult
from kls.sandbox.workers import render_isolated
from kls.template.model import parse_template

DEFAULT_SHARED_LIMIT = 232448  # an H200's shared memory per block (opt-in)
_AT = re.compile(r"^at (\d+):(\d+):", re.M)


def compile_triton(
    instance: InstanceSpec, overrides: dict[Path, str] | None = None, sass: bool = False
) -> tuple[bool, list[Finding], RenderResult, dict[str, Any], bool]:
    """(ok, findings, the render, Triton's figures, cached); with `sass`, the cubin's SASS
    listing too (nvdisasm: about 0.4 s, so only for the editor's SASS view)."""
    rendered = render_isolated(instance, overrides)
    refused = any(f.severity is Severity.ERROR for f in rendered.findings)  # e.g. KT814
    if not rendered.ok or rendered.text is None or refused:
        return (
            False,
            render_findings(rendered, ModelCache(overrides).for_render(rendered)),
            rendered,
            {},
            False,
        )
    request = {
        "kind": "compile",
        "module": rendered.text,
        "cc": int(instance.device.get("cc", 90)),
        "num_warps": instance.num_warps,
        "num_stages": instance.num_stages,
        "sass": sass,
        "error_line": "innermost",  # answers that place an error by its own jit function
    }
    key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:32]
    path = cache_dir("triton-compile") / f"{key}.json"
    cached = path.is_file()
    try:
        answer = json.loads(path.read_text()) if cached else None
    except (OSError, ValueError):
        answer, cached = None, False
    if answer is None:
        try:
            answer = shared_worker().render(request)
        except WorkerUnavailable as exc:
            note = _finding(instance, rendered, 0, "KT800", Severity.INFO, str(exc))
            return True, [note], rendered, {}, False
        if (answer.get("error") or {}).get("kind") not in ("limit", "crash"):
            write_atomic(path, json.dumps(answer).encode())
    return (*_judge(instance, rendered, answer), rendered, answer, cached)


def _judge(
    instance: InstanceSpec, rendered: RenderResult, answer: dict[str, Any]
) -> tuple[bool, list[Finding]]:
    error = answer.get("error")
    if error:
        message = str(error.get("message", ""))
        line = error.get("module_line")  # the worker's, from the innermost error's function
        line = line if isinstance(line, int) else _module_line(message, answer)
        first = message.strip().split("\n")[-1][:300]
        code = "KT104" if error.get("kind") in ("limit", "crash") else "KT861"
        text = (
            f"Triton's compile for sm_{instance.device.get('cc', 90)} failed: {first}"
            if code == "KT861"
            else message
        )
        return False, [_finding(instance, rendered, line, code, Severity.ERROR, text)]
    kernel_line = int(answer.get("kernel_line", 0))
    limit = int(instance.device.get("shared_memory_per_block", DEFAULT_SHARED_LIMIT))
    shared = int(answer.get("shared", 0))
    out: list[Finding] = []
    regs = answer.get("registers")
    out.append(
        _finding(
            instance,
            rendered,
            kernel_line,
            "KT860",
            Severity.INFO,
            f"Triton sm_{instance.device.get('cc', 90)}: {regs} registers, {shared} B shared "
            f"memory of {limit} B, {instance.num_warps} warps, {instance.num_stages} stages",
        )
    )
    if shared > limit:
        out.append(
            _finding(
                instance,
                rendered,
                kernel_line,
                "KT862",
                Severity.ERROR,
                f"out of resource: shared memory, Required: {shared} Hardware limit: {limit}; "
                "the autotuner would drop this config on the GPU: lower the block sizes or "
                "num_stages",
            )
        )
    spilled = [f"{k} {answer.get(k)} B" for k in ("stack", "local") if (answer.get(k) or 0) > 0]
    if spilled:
        out.append(
            _finding(
                instance,
                rendered,
                kernel_line,
                "KT863",
                Severity.WARNING,
                f"registers spill ({', '.join(spilled)} per thread, {regs} registers): lower "
                "the block sizes or raise num_warps",
            )
        )
    return not any(f.severity == Severity.ERROR for f in out), out


def _module_line(message: str, answer: dict[str, Any]) -> int:
    """The module line a Triton error names: `at L:C` counts from the kernel's def line."""
    found = _AT.search(message)
    if found is None:
        return int(answer.get("kernel_line", 0) or 0)
    return int(answer.get("kernel_line", 0) or 0) + int(found.group(1)) - 1


def _finding(
    instance: InstanceSpec,
    rendered: RenderResult,
    module_line: int,
    code: str,
    severity: Severity,
    message: str,
) -> Finding:
    origin = rendered.source_map.origin(module_line) if rendered.source_map else None
    path = origin.path if origin else str(instance.template)
    line = origin.line if origin else 0
    try:
        model = parse_template(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        model = None
    return Finding(
        code, severity, line_range(model, line), message, path, instance.name, source="triton"
    )
