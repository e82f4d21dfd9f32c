"""The tune table an instance declares in kls.toml, `[instances.NAME.tune]`, parsed and
checked (by the config loader, so a mistake is a finding at its line, and by `kls tune`).
It lives with the instances because kls.toml is theirs; `kls tune` reads it from here.

    [instances.torch211_sm90_bf16_4096.tune]
    swizzle = [1, 2, 4, 8]                     # any template variable: the values to try
    op_filter = { contains = ["warpspecialized"], exclude = ["pingpong"] }
    ops = ["cutlass3x_sm90_..."]               # optional: exactly these ops (still filtered)
    shapes = [[128, 4096, 4096], [8192, 14336, 4096]]   # optional: GEMM M, N, K to time
    cutlass_instantiation_level = "2222"       # optional: draw the ops from this list
    dispatch = "m"                             # optional: --apply also writes one instance
                                               # per M bucket of the shapes (kls.tune.dispatch);
                                               # "mn": and one per N that another config wins

Every key other than `op_filter`, `ops`, `shapes`, `cutlass_instantiation_level` and
`dispatch` names a template variable and lists its values; candidates are the compatible ops
crossed with every combination. A variable that the profile passes at run time (torch-2.11
GEMMs: `swizzle`; torch-2.11-streamk adds the stream-K scheduler's) needs no build of its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

RESERVED = ("op_filter", "ops", "shapes", "cutlass_instantiation_level", "dispatch")
# "m": one instance per M bucket of the tuned shapes; "mn": also one per (M bucket, N) whose own
# best beats the bucket's configuration there (kls.tune.dispatch.N_MARGIN).
DISPATCH_KINDS = ("m", "mn")
FILTER_KEYS = ("contains", "exclude")


def level_problem(level: str) -> str | None:
    """Why `level` is not an instantiation level cutlass_library takes, or None."""
    if level.isascii() and level.isdigit() and len(level) <= 4:
        return None
    return (
        f"cutlass_instantiation_level is '{level}'; it takes up to four digits, as Inductor's "
        'cuda.cutlass_instantiation_level: "0" (the default), "1111", "2222", ... "9999"'
    )


class TuneSpaceError(Exception):
    """The tune table is malformed; the message says where and how to fix it, and `key` names
    the table's key at fault (None: the table as a whole)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class TuneSpace:
    contains: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    variables: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    shapes: tuple[tuple[int, int, int], ...] = ()
    level: str | None = None  # Inductor's cutlass_instantiation_level; None: the instance's
    declared: bool = False  # False: the instance has no tune table (defaults used)
    dispatch: str | None = None  # "m" / "mn": --apply writes a dispatch too (DISPATCH_KINDS)

    def combos(self, names: tuple[str, ...]) -> list[dict[str, Any]]:
        """Every combination of the listed values of `names` (in declaration order)."""
        keys = [n for n in self.variables if n in names]
        values = [self.variables[k] for k in keys]
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def parse_space(raw: Any, where: str, runtime: tuple[str, ...] = ()) -> TuneSpace:
    """The table, checked; `runtime` names the variables the profile passes to the kernel at
    each call (kls.tune.space.runtime_variables), whose values must be integers 0-255."""
    if not isinstance(raw, dict):
        raise TuneSpaceError(f"{where} must be a table")
    op_filter = raw.get("op_filter", {})
    if not isinstance(op_filter, dict):
        raise TuneSpaceError(
            f"{where}: op_filter must be a table, e.g. {{ contains = [...] }}", "op_filter"
        )
    for key in op_filter:
        if key not in FILTER_KEYS:
            raise TuneSpaceError(
                f"{where}: unknown op_filter key '{key}' (use contains, exclude)", "op_filter"
            )
    contains = _strings(op_filter.get("contains", []), f"{where}: op_filter.contains")
    exclude = _strings(op_filter.get("exclude", []), f"{where}: op_filter.exclude")
    ops = _strings(raw.get("ops", []), f"{where}: ops")
    shapes = _shapes(raw.get("shapes", []), where)
    if "shapes" in raw and not shapes:
        raise TuneSpaceError(
            f"{where}: shapes lists no shapes (leave the key out to time the instance's own)",
            "shapes",
        )
    level = _level(raw.get("cutlass_instantiation_level"), where)
    dispatch = raw.get("dispatch")
    if dispatch is not None and dispatch not in DISPATCH_KINDS:
        raise TuneSpaceError(
            f'{where}: dispatch is {dispatch!r}; use "m" (one instance per M bucket of the '
            'shapes) or "mn" (also one per N within a bucket where another configuration wins)',
            "dispatch",
        )
    ms, ns = {s[0] for s in shapes}, {s[1] for s in shapes}
    if dispatch == "m" and len(ms) < 2:
        raise TuneSpaceError(
            f"{where}: dispatch = 'm' needs shapes of at least two M values (each M bucket "
            "gets its own instance)",
            "dispatch",
        )
    if dispatch == "mn" and len(ms) < 2 and len(ns) < 2:
        raise TuneSpaceError(
            f"{where}: dispatch = 'mn' needs shapes of at least two M or two N values (each "
            "M bucket, and each N that another configuration wins, gets its own instance)",
            "dispatch",
        )
    variables: dict[str, tuple[Any, ...]] = {}
    for key, value in raw.items():
        if key in RESERVED:
            continue
        if not key.isidentifier():
            raise TuneSpaceError(f"{where}: '{key}' is not a template variable name")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise TuneSpaceError(f"{where}: '{key}' lists no values", key)
        if any(isinstance(v, (dict, list)) for v in values):
            raise TuneSpaceError(f"{where}: '{key}' must list plain values (numbers, strings)", key)
        kinds = {"string" if isinstance(v, str) else "number" for v in values}
        if len(kinds) > 1:
            raise TuneSpaceError(
                f"{where}: '{key}' mixes numbers and strings ({values!r}); list one kind", key
            )
        bad = [v for v in values if not _int_in(v, 0, 255)] if key in runtime else []
        if bad:
            raise TuneSpaceError(
                f"{where}: '{key}' is passed to the kernel at run time as an integer 0-255; "
                f"{bad[0]!r} is not one"
            )
        variables[key] = tuple(dict.fromkeys(values))  # duplicates once, order kept
    return TuneSpace(
        contains, exclude, ops, variables, shapes, level, declared=True, dispatch=dispatch
    )


def _level(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TuneSpaceError(
            f'{where}: cutlass_instantiation_level must be a string like "2222"',
            "cutlass_instantiation_level",
        )
    problem = level_problem(str(value))
    if problem is not None:
        raise TuneSpaceError(f"{where}: {problem}", "cutlass_instantiation_level")
    return str(value)


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TuneSpaceError(f"{what} must be a list of strings")
    return tuple(value)


def _shapes(value: Any, where: str) -> tuple[tuple[int, int, int], ...]:
    if not isinstance(value, list):
        raise TuneSpaceError(f"{where}: shapes must be a list of [M, N, K]", "shapes")
    out = []
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not all(_int_in(v, 1, None) for v in item)
        ):
            raise TuneSpaceError(
                f"{where}: each shape must be [M, N, K] of positive integers", "shapes"
            )
        out.append((item[0], item[1], item[2]))
    return tuple(dict.fromkeys(out))


def _int_in(value: Any, low: int, high: int | None) -> bool:
    """An integer (not a bool) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return value >= low and (high is None or value <= high)
