"""Config values Inductor's lowering replaced: every value of a Triton kernel's config is
printed into the module as `NAME : tl.constexpr = VALUE`, so a variable of the instance that
comes out with another value was overridden (flex's USE_TMA where Inductor's can_use_tma says
no: misaligned head dims, a device without TMA). The kernel that runs is the printed one."""

from __future__ import annotations

import ast
import re
from typing import Any

from kls.findings import Severity
from kls.instances.locate import instance_key_range
from kls.instances.schema import InstanceSpec
from kls.runtime.record import RuntimeFinding, Site

_CONSTEXPR = re.compile(r"^\s*([A-Za-z_]\w*)\s*:\s*tl\.constexpr\s*=\s*(.+?)\s*$", re.MULTILINE)


def constexprs(module: str) -> dict[str, str]:
    """Every `NAME : tl.constexpr = VALUE` the module prints: name -> the printed value (the
    first, where several kernels print one)."""
    printed: dict[str, str] = {}
    for name, text in _CONSTEXPR.findall(module):
        printed.setdefault(name, text)
    return printed


def overridden(variables: dict[str, Any], module: str) -> dict[str, str]:
    """The variables the module prints with another value: name -> the printed value."""
    return overridden_in(variables, constexprs(module))


def overridden_in(variables: dict[str, Any], printed: dict[str, str]) -> dict[str, str]:
    """`overridden` for a module's constexprs already read (`printed`)."""
    found: dict[str, str] = {}
    for name, value in variables.items():
        text = printed.get(name)
        if text is not None and not _same(value, text):
            found[name] = text
    return found


def printed_value(text: str) -> Any:
    """A printed constexpr as a Python value (the text itself where it is not a literal)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _same(value: Any, text: str) -> bool:
    if isinstance(value, str):  # printed as written (a string carries its own quotes)
        return value.strip() == text
    try:
        got = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return True  # not a literal (a name, an expression): nothing to compare
    return bool(got == value) and isinstance(got, bool) == isinstance(value, bool)


def var_site(instance: InstanceSpec, name: str, config_text: str | None = None) -> Site:
    """The kls.toml line of the instance's variable `name` (its `vars` line)."""
    if config_text is None:
        try:
            config_text = instance.config_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            config_text = ""
    at = instance_key_range(instance.config_path, config_text, instance.name, "vars", name)
    return Site(str(instance.config_path), at.start.line)


def overridden_findings(instance: InstanceSpec, module: str) -> list[RuntimeFinding]:
    """KT816 at the kls.toml line of each variable the module was made with another value."""
    return [
        RuntimeFinding(
            "KT816",
            Severity.WARNING,
            f"Inductor's lowering made this kernel with {name} = {printed}, not "
            f"{instance.variables[name]!r} as kls.toml says (for flex's USE_TMA: TMA cannot "
            "be used for these tensors or this device); the module, kls bench and kls tune "
            f"run {name} = {printed}",
            var_site(instance, name),
        )
        for name, printed in overridden(instance.variables, module).items()
    ]
