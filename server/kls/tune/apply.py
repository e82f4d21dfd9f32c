"""`--apply`: write the winner's op and variables into the instance's table in kls.toml (or
`[tool.kls]` in pyproject.toml) with tomlkit, so every comment, blank line and the order and
style of the other keys stay as they were. `op_filter` gives way to the exact `op`, and a
winner from another op list (the tune table's `cutlass_instantiation_level`) brings its level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kls.cache_dir import write_atomic


class ApplyError(Exception):
    pass


def apply_winner(
    config: Path, instance: str, op: str, variables: dict[str, Any], level: str = "0"
) -> str:
    """Edit `config` in place; returns a one-line description of the change."""
    try:
        import tomlkit
        from tomlkit.exceptions import TOMLKitError
    except ImportError:
        raise ApplyError("--apply needs tomlkit: pip install tomlkit") from None
    try:
        doc = tomlkit.parse(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, TOMLKitError) as exc:
        raise ApplyError(f"cannot read {config}: {exc}") from None
    root: Any = doc
    if config.name == "pyproject.toml":
        root = doc.get("tool", {}).get("kls", {})
    instances = root.get("instances") if hasattr(root, "get") else None
    table = instances.get(instance) if instances is not None else None
    if table is None:
        raise ApplyError(f"{config} has no table for instance '{instance}'")
    old_op = table.get("op")
    table["op"] = op
    if "op_filter" in table:
        del table["op_filter"]
    level_note = _apply_level(table, level)
    if variables:
        current = table.get("vars")
        if current is None:
            inline = tomlkit.inline_table()
            inline.update(variables)
            table["vars"] = inline
        else:
            for k, v in variables.items():
                current[k] = v
    write_atomic(config, tomlkit.dumps(doc).encode("utf-8"))
    changed = "op unchanged" if old_op == op else f"op {old_op} -> {op}"
    settings = ", ".join(f"{k} = {v}" for k, v in variables.items())
    return (
        f"{config}: [instances.{instance}] {changed}"
        + (f"; {settings}" if settings else "")
        + level_note
    )


def level_to_write(op: str, op_level: str, instance_level: str, arch: str) -> str:
    """The level to write with `op`: the instance's own when its list holds `op` too (a small
    level generates its list in a fraction of the time), else the level whose list held it."""
    from kls.cutlass.ops import resolve_op_name

    try:
        resolve_op_name(op, (), arch, instance_level)
    except Exception:  # not listed (OpLookupError), or the list could not be generated
        return op_level
    return instance_level


def _apply_level(table: Any, level: str) -> str:
    """The op is looked up in the list of the instance's level: write the winner's."""
    key = "cutlass_instantiation_level"
    old = str(table.get(key, "0"))
    if old == level:
        return ""
    if level == "0":
        del table[key]
    else:
        table[key] = level
    return f"; {key} {old} -> {level}"
