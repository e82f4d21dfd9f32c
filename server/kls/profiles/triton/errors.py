"""Inductor's exceptions from a Triton template's render, as findings that say what is wrong.

Inductor raises bare assertions (`AssertionError` with an empty message, or a tuple such as
`'(1, 2, 0, 2)'`) and `KeyError 'C'` for most template mistakes; the worker reports the
exception, the template line Jinja maps it to and the Inductor function it came through.
"""

from __future__ import annotations

import re
from typing import Any

from kls.findings import Severity
from kls.instances.schema import InstanceSpec
from kls.profiles.triton.tensors import output_name
from kls.runtime.record import RuntimeFinding, Site


def _names(instance: InstanceSpec) -> str:
    out = output_name(instance)
    return ", ".join(n for n in instance.tensors if n != out) or "none"


def finding_for(error: dict[str, Any], instance: InstanceSpec, text: str) -> RuntimeFinding:
    """The finding for the worker's `error` of one render of `instance`'s template."""
    kind = str(error.get("kind", ""))
    message = str(error.get("message", ""))
    function = error.get("function") or ""
    line = error.get("line")
    site = Site(str(instance.template), int(line)) if isinstance(line, int) else None
    if site is None:
        site = Site(str(instance.template), _line_of(text, function))
    if kind == "TemplateTimeLimit":
        return RuntimeFinding("KT104", Severity.ERROR, message, site)
    if kind == "UndefinedError":
        return RuntimeFinding("KT102", Severity.ERROR, message, site)
    if kind in ("SecurityError", "SandboxLimit"):
        return RuntimeFinding("KT106", Severity.ERROR, f"the sandbox refused: {message}", site)
    if kind == "TemplateSyntaxError":
        return RuntimeFinding("KT101", Severity.ERROR, message, site)
    if kind == "LookupError":  # no Inductor template of this text
        return RuntimeFinding(
            "KT804", Severity.ERROR, message, Site(str(instance.config_path), instance.line)
        )
    if kind == "KeyError" and function in ("size", "stride", "load_input", "make_load"):
        name = message.strip("'\"")
        return RuntimeFinding(
            "KT802",
            Severity.ERROR,
            f"{function}('{name}'): no buffer '{name}' in this kernel; def_kernel names "
            f"{_names(instance)} (size(None, i) and stride(None) read the output)",
            site,
            helper=function,
        )
    if kind == "AssertionError" and function == "def_kernel":
        return RuntimeFinding(
            "KT803",
            Severity.ERROR,
            f"def_kernel names a different number of inputs than the instance has "
            f"({_names(instance)}; Inductor asserts {message or 'with no message'})",
            site,
            helper="def_kernel",
        )
    if "multiple times" in message and "hook" in message:
        return RuntimeFinding(
            "KT805",
            Severity.ERROR,
            f"{function or 'a helper'} is called a second time on this render path; Inductor "
            "registers one hook per placeholder: call it once",
            site,
        )
    if kind == "AssertionError" and function == "load_input":
        return RuntimeFinding(
            "KT805",
            Severity.ERROR,
            "load_input is called twice for one input (Inductor asserts, with no message); "
            "load each input once",
            site,
            helper="load_input",
        )
    if kind in ("limit", "crash"):
        return RuntimeFinding("KT104", Severity.ERROR, message, site)
    where = f" in Inductor's {function}" if function else ""
    said = message if message and not re.fullmatch(r"\(?[\d, ]*\)?", message) else "no message"
    return RuntimeFinding(
        "KT103", Severity.ERROR, f"Inductor's render raised {kind}{where}: {said}", site
    )


def _line_of(text: str, function: str) -> int:
    """The first template line that calls `function` (0 when none does)."""
    if function:
        for i, line in enumerate(text.split("\n")):
            if f"{function}(" in line:
                return i
    return 0
