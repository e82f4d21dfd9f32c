"""`--apply`: write the winner's op and variables into the instance's table in kls.toml (or
`[tool.kls]` in pyproject.toml) with tomlkit, so every comment, blank line and the order and
style of the other keys stay as they were. `op_filter` gives way to the exact `op`, and a
winner from another op list (the tune table's `cutlass_instantiation_level`) brings its level.

With `dispatch = "m"` (or "mn") in the tune table, `--apply` also writes one instance per
bucket (`apply_dispatch`): a copy of the instance's own table (less its tune table), its
tensors at the bucket's M (and N), and the bucket's op and variables; a bucket instance that
exists already only has its op, variables and level replaced, as the instance's own does."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kls.cache_dir import write_atomic
from kls.instances.schema import column_major_strides, contiguous_strides


class ApplyError(Exception):
    pass


def apply_winner(
    config: Path, instance: str, op: str, variables: dict[str, Any], level: str = "0"
) -> str:
    """Edit `config` in place; returns a one-line description of the change."""
    doc = _document(config)
    change = _set_winner(_table_of(doc, config, instance), op, variables, level)
    write_atomic(config, _dumps(doc))
    return f"{config}: [instances.{instance}] {change}"


def _set_winner(table: Any, op: str, variables: dict[str, Any], level: str) -> str:
    """Write the winner into the instance's table; the change in words."""
    old_op = table.get("op")
    table["op"] = op
    if "op_filter" in table:
        del table["op_filter"]
    level_note = _apply_level(table, level)
    _set_variables(table, variables)
    changed = "op unchanged" if old_op == op else f"op {old_op} -> {op}"
    settings = ", ".join(f"{k} = {v}" for k, v in variables.items())
    return changed + (f"; {settings}" if settings else "") + level_note


def apply_config(config: Path, instance: str, values: dict[str, Any]) -> str:
    """Write a tuned config (num_warps, num_stages and template variables: a Triton
    instance's) into the instance's table; a one-line description of the change."""
    doc = _document(config)
    table = _table_of(doc, config, instance)
    launch = {k: v for k, v in values.items() if k in ("num_warps", "num_stages")}
    for key, value in launch.items():
        table[key] = value
    variables = {k: v for k, v in values.items() if k not in launch}
    _set_variables(table, variables)
    write_atomic(config, _dumps(doc))
    settings = ", ".join(f"{k} = {v}" for k, v in values.items())
    return f"{config}: [instances.{instance}] {settings}"


def _document(config: Path) -> Any:
    """kls.toml (or pyproject.toml) parsed by tomlkit, which keeps comments and layout."""
    try:
        import tomlkit
        from tomlkit.exceptions import TOMLKitError
    except ImportError:
        raise ApplyError("--apply needs tomlkit: pip install tomlkit") from None
    try:
        return tomlkit.parse(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, TOMLKitError) as exc:
        raise ApplyError(f"cannot read {config}: {exc}") from None


def _instances_of(doc: Any, config: Path) -> Any:
    """The document's `instances` table (under [tool.kls] in pyproject.toml), or None."""
    root: Any = doc.get("tool", {}).get("kls", {}) if config.name == "pyproject.toml" else doc
    return root.get("instances") if hasattr(root, "get") else None


def _table_of(doc: Any, config: Path, instance: str) -> Any:
    instances = _instances_of(doc, config)
    table = instances.get(instance) if instances is not None else None
    if table is None:
        raise ApplyError(f"{config} has no table for instance '{instance}'")
    return table


def _set_variables(table: Any, variables: dict[str, Any]) -> None:
    """Set `variables` in the table's `vars` (an inline table made where there is none)."""
    import tomlkit

    if not variables:
        return
    current = table.get("vars")
    if current is None:
        inline = tomlkit.inline_table()
        inline.update(variables)
        table["vars"] = inline
    else:
        for k, v in variables.items():
            current[k] = v


def _dumps(doc: Any) -> bytes:
    import tomlkit

    return tomlkit.dumps(doc).encode("utf-8")


BUCKET_SKIPPED = ("tune", "op", "op_filter", "vars", "cutlass_instantiation_level", "tensors")


def apply_dispatch(config: Path, instance: str, buckets: list[Bucket]) -> list[str]:
    """Write each bucket's instance into `config` (created from `instance`'s table when it is
    not there yet), in one edit of the file; one line a bucket saying what changed."""
    doc = _document(config)
    base = _table_of(doc, config, instance)
    instances = _instances_of(doc, config)
    lines = []
    for bucket in buckets:
        created = bucket.name not in instances
        if created:
            instances.add(bucket.name, _bucket_table(instance, base, bucket))
        change = _set_winner(instances[bucket.name], bucket.op, bucket.variables, bucket.level)
        new = ", new" if created else ""
        lines.append(f"{config}: [instances.{bucket.name}] {change} ({bucket.where}{new})")
    write_atomic(config, _dumps(doc))
    return lines + stale_lines(config, instance, list(instances), [b.name for b in buckets])


def stale_dispatch(config: Path, instance: str) -> list[str]:
    """What `--apply` says when a tune wrote no dispatch: the dispatch instances an earlier
    one left in `config`."""
    instances = _instances_of(_document(config), config)
    return stale_lines(config, instance, list(instances or []), [])


def stale_lines(config: Path, instance: str, names: list[str], written: list[str]) -> list[str]:
    return [
        f"{config}: [instances.{name}] is no longer part of the dispatch (an earlier --apply "
        "wrote it); kls leaves it as it is: remove it, or the caller may still pick it"
        for name in stale_buckets(instance, names, written)
    ]


def stale_buckets(instance: str, names: list[str], written: list[str]) -> list[str]:
    """Instances named as a dispatch bucket of `instance` (`_m<M>`, `_m<M>_n<N>`) that this
    dispatch did not write: an earlier one's, e.g. an N that no longer wins on its own."""
    pattern = re.compile(rf"{re.escape(instance)}_m\d+(?:_n\d+)?")
    return [n for n in names if pattern.fullmatch(n) and n not in written]


@dataclass(frozen=True)
class Bucket:
    """One instance of the dispatch: its name, the M range (and N) it serves (`where`, in
    words), the M (and N) its tensors take, and its configuration."""

    name: str
    where: str
    m: int
    op: str
    variables: dict[str, Any]
    level: str
    n: int | None = None  # None: the M bucket's instance, for every N


def _bucket_table(instance: str, base: Any, bucket: Bucket) -> Any:
    """The bucket's table, made from the instance's own."""
    import tomlkit

    table = tomlkit.table()
    table.comment(f"dispatch of {instance} (kls tune --apply): {bucket.where}")
    for key, value in base.items():
        if key not in BUCKET_SKIPPED:
            table.add(key, value.unwrap() if hasattr(value, "unwrap") else value)
    for name, tensor in _bucket_tensors(base.get("tensors"), bucket.m, bucket.n).items():
        table.add(tomlkit.key(["tensors", name]), tensor)
    return table


ROWS_ARE_M = ("X", "Y", "Bias")
COLUMNS_ARE_N = ("W", "Y", "Bias")


def _bucket_tensors(tensors: Any, m: int, n: int | None = None) -> dict[str, Any]:
    """The instance's tensors with M (the rows of X, Y and a Bias) set to `m`, and N (the
    columns of W, Y and a Bias) to `n` when it is given; an explicit stride follows the new
    shape in the same row- or column-major order (a broadcast row stays one), as the tune's
    own tensors at each shape did (kls.tune.candidates.at_shape)."""
    import tomlkit

    out: dict[str, Any] = {}
    for name, value in (tensors or {}).items():
        plain = value.unwrap() if hasattr(value, "unwrap") else value
        if isinstance(plain, dict) and "shape" in plain and len(plain["shape"]) >= 2:
            shape = list(plain["shape"])
            if name in ROWS_ARE_M:
                shape[-2] = m
            if n is not None and name in COLUMNS_ARE_N:
                shape[-1] = n
            plain = {**plain, "shape": shape}
            if isinstance(plain.get("stride"), list) and len(shape) == 2:
                plain["stride"] = _stride_like(list(plain["stride"]), shape)
        if isinstance(plain, dict):
            inline = tomlkit.inline_table()
            inline.update(plain)
            out[name] = inline
        else:
            out[name] = plain
    return out


def _stride_like(stride: list[int], shape: list[int]) -> list[int]:
    if stride == [0, 1]:
        return stride
    if stride[-1] == 1:
        return list(contiguous_strides(tuple(shape)))
    return list(column_major_strides(tuple(shape)))


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
