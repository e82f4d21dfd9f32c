"""The tune space of an instance: its `[instances.NAME.tune]` table (parsed by
kls.instances.tune_table) read from its config, and the variables its profile passes at run
time."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kls.instances import InstanceSpec
from kls.instances.tune_table import TuneSpace, TuneSpaceError, parse_space
from kls.profiles import profile

__all__ = [
    "TuneSpace",
    "TuneSpaceError",
    "load_space",
    "parse_space",
    "runtime_variables",
    "unread_variables",
]


def runtime_variables(spec: InstanceSpec) -> tuple[str, ...]:
    """Variables the entry point takes at each call (one build serves all their values)."""
    return profile(spec.profile).runtime_variables(spec)


def load_space(spec: InstanceSpec) -> TuneSpace:
    """The instance's tune table, read from its config file."""
    try:
        data = tomllib.loads(spec.config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TuneSpaceError(f"cannot read {spec.config_path}: {exc}") from None
    table = _instance_table(data, spec.config_path, spec.name)
    raw = table.get("tune") if table is not None else None
    if raw is None:
        return TuneSpace()
    where = f"{spec.config_path}: [instances.{spec.name}.tune]"
    return parse_space(raw, where, runtime_variables(spec))


# A template that pulls in another: the names it reads are not all in view.
_PULLS_IN = re.compile(r"\{%-?\s*(?:include|import|from|extends)\b")


def unread_variables(spec: InstanceSpec, space: TuneSpace) -> list[str]:
    """Tune-table variables that neither the instance's templates mention nor the profile
    passes at run time nor the instance sets: a typo (`swizle`) builds the same kernel for
    every value. Empty when a template includes, imports or extends another, or cannot be
    read (a name may live there: no false alarm)."""
    from kls.checks.run import read_template
    from kls.template.model import parse_template

    names: set[str] = set()
    for ref in (spec.template, spec.argument_template, spec.epilogue_template):
        if ref is None:
            continue
        text, _problem = read_template(Path(ref))
        if text is None or _PULLS_IN.search(text):
            return []
        names |= set(parse_template(text).name_uses)
    known = names | set(runtime_variables(spec)) | set(spec.variables)
    return [n for n in space.variables if n not in known]


def _instance_table(data: dict[str, Any], path: Path, name: str) -> dict[str, Any] | None:
    root = data
    if path.name == "pyproject.toml":
        root = data.get("tool", {}).get("kls", {})
    instances = root.get("instances", {})
    table = instances.get(name) if isinstance(instances, dict) else None
    return table if isinstance(table, dict) else None
