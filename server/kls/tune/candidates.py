"""Candidates: the CUTLASS ops compatible with an instance, crossed with its tune space.

Compatibility is the instance's profile's (`Profile.compatible_ops`; for torch-2.11,
Inductor's own op filter in kls.profiles.torch211.filter), sorted by configuration name. The
tune table's `op_filter` / `ops` narrow it.

`--limit N` keeps N candidates spread evenly over that sorted list (indices
floor(i * len / N), i = 0..N-1): the same space and N always give the same subset, and it
covers every tile family instead of the alphabetical prefix Inductor's own cap keeps.

Runtime arguments (the variables the profile passes at each call: swizzle, and for
`torch-2.11-streamk` the stream-K scheduler's splits, decomposition, reduction and raster)
cost no build but multiply the measurements: every combination the table lists is put in the
profile's canonical form (`Profile.runtime_setting`), the ones the entry refuses are dropped,
settings that run alike are timed once, and at most RUNTIME_SETTINGS_CAP are kept (spread
evenly, the instance's own setting always among them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from kls.instances import InstanceSpec, TensorSpec
from kls.instances.schema import column_major_strides, contiguous_strides
from kls.profiles import ConfigProblem, OpChoice, profile
from kls.tune.space import TuneSpace, runtime_variables

RUNTIME_SETTINGS_CAP = 64  # runtime-argument settings timed per build (stage 2: each shape)


class CandidateError(Exception):
    """No candidates can be made for this instance; the message says why."""


@dataclass(frozen=True)
class BuildUnit:
    """One library to build: an op and the variables that change the source."""

    id: str
    choice: OpChoice
    build_vars: dict[str, Any] = field(default_factory=dict)

    def spec(self, base: InstanceSpec) -> InstanceSpec:
        return dataclasses.replace(
            base,
            op=self.choice.op,
            op_filter=None,
            instantiation_level=self.choice.level,
            variables={**base.variables, **self.build_vars},
        )


@dataclass(frozen=True)
class Candidate:
    """A build unit and the runtime variables it is called with."""

    unit: BuildUnit
    runtime_vars: dict[str, Any]

    @property
    def id(self) -> str:
        suffix = ",".join(f"{k}={v}" for k, v in self.runtime_vars.items())
        return f"{self.unit.id}[{suffix}]" if suffix else self.unit.id

    @property
    def variables(self) -> dict[str, Any]:
        return {**self.unit.build_vars, **self.runtime_vars}


@dataclass
class CandidateSet:
    units: list[BuildUnit]
    runtime_combos: list[dict[str, Any]]
    total_ops: int  # compatible ops (Inductor's list) before op_filter/ops/--limit
    distinct_ops: int  # distinct kernels among them
    filtered_ops: int  # after op_filter/ops, before --limit
    # listed, refused, alike, distinct and timed runtime settings, and the cap (results v2)
    runtime_space: dict[str, int] = field(default_factory=dict)
    dispatch: str | None = None  # the tune table's dispatch kind ("m", "mn") or none

    def candidates(self) -> list[Candidate]:
        return [Candidate(u, dict(r)) for u in self.units for r in self.runtime_combos]


def compatible_ops(spec: InstanceSpec, level: str | None = None) -> list[OpChoice]:
    """The ops the instance's profile would consider at `level` (default: the instance's)."""
    try:
        return profile(spec.profile).compatible_ops(spec, level)
    except ConfigProblem as exc:
        raise CandidateError(str(exc)) from None


def distinct(choices: list[OpChoice]) -> list[OpChoice]:
    """One op per distinct kernel: Inductor's list holds ops that differ only in name once
    its filter has set their C element and alignments (e.g. `..._bf16_bf16_...` and
    `..._void_bf16_...` without a bias); building both would time the same kernel twice."""
    seen: dict[str, OpChoice] = {}
    for c in choices:
        seen.setdefault(c.kernel or c.conf_name, c)
    return list(seen.values())


def select(choices: list[OpChoice], space: TuneSpace) -> list[OpChoice]:
    out = [
        c
        for c in choices
        if all(f in c.op or f in c.conf_name for f in space.contains)
        and not any(f in c.op or f in c.conf_name for f in space.exclude)
    ]
    if space.ops:
        wanted = set(space.ops)
        out = [c for c in out if c.op in wanted or c.conf_name in wanted]
    return out


def _check_named_ops(space: TuneSpace, choices: list[OpChoice]) -> None:
    """Every op the tune table's `ops` names must be one Inductor would consider here."""
    from kls.suggest import did_you_mean

    names = {c.op for c in choices} | {c.conf_name for c in choices}
    for op in space.ops:
        if op not in names:
            raise CandidateError(
                f"the tune table's ops names '{op}', which is not among the {len(choices)} ops "
                f"compatible with this instance at its level{did_you_mean(op, names)}"
            )


def spread(items: list[Any], limit: int | None) -> list[Any]:
    """`limit` items evenly spread over `items` (all of them when limit is None or larger)."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit <= 0:
        return []
    return [items[i * len(items) // limit] for i in range(limit)]


def unit_id(op: str, build_vars: dict[str, Any]) -> str:
    key = json.dumps([op, sorted(build_vars.items())], default=str)
    return "b" + hashlib.sha256(key.encode()).hexdigest()[:8]


def make_candidates(spec: InstanceSpec, space: TuneSpace, limit: int | None = None) -> CandidateSet:
    """Build units (ops x source-changing variables, `--limit` applied to them) and the
    runtime-variable combinations each is timed with."""
    choices = compatible_ops(spec, space.level)
    _check_named_ops(space, choices)
    unique = distinct(choices)
    selected = select(unique, space)
    if not selected:
        raise CandidateError(
            f"no compatible op is left after the tune table's op_filter/ops "
            f"({len(choices)} compatible before it)"
        )
    runtime = runtime_variables(spec)
    build_combos = space.combos(tuple(n for n in space.variables if n not in runtime))
    units = [BuildUnit(unit_id(c.op, combo), c, combo) for c in selected for combo in build_combos]
    runtime_combos, counts = runtime_settings(spec, space)
    return CandidateSet(
        spread(units, limit),
        runtime_combos,
        len(choices),
        len(unique),
        len(selected),
        counts,
        space.dispatch,
    )


def runtime_settings(
    spec: InstanceSpec, space: TuneSpace, cap: int = RUNTIME_SETTINGS_CAP
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The runtime-argument settings to time (each holds the listed variables only; the
    others keep the instance's values) and the counts behind them (results.json's
    `runtime_space`)."""
    runtime = runtime_variables(spec)
    listed = space.combos(runtime) if any(n in space.variables for n in runtime) else []
    if not listed:
        current = {n: spec.variables[n] for n in runtime if n in spec.variables}
        counts = dict(listed=1, refused=0, alike=0, distinct=1, timed=1, cap=cap)
        return [current], counts
    facts = profile(spec.profile)
    own = facts.runtime_defaults(spec)
    own.update({n: spec.variables[n] for n in runtime if n in spec.variables})
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    refused = 0
    for combo in listed:
        setting = facts.runtime_setting(spec, {**own, **combo})
        if setting is None:
            refused += 1
            continue
        key = json.dumps(sorted(setting.items()), default=str)
        if key not in seen:
            seen.add(key)
            kept.append(combo)
    if not kept:
        raise CandidateError(
            f"the tune table's runtime arguments ({', '.join(listed[0])}) list "
            f"{len(listed)} setting(s) and the entry refuses every one (e.g. splits > 1 "
            "needs the split-K or heuristic decomposition): list a valid combination"
        )
    timed = spread(kept, cap)
    own_combo = {k: own[k] for k in listed[0] if k in own}
    if own_combo in kept and own_combo not in timed:
        timed[-1] = own_combo  # the current setting is always measured
    counts = dict(
        listed=len(listed),
        refused=refused,
        alike=len(listed) - refused - len(kept),
        distinct=len(kept),
        timed=len(timed),
        cap=cap,
    )
    return timed, counts


def at_shape(spec: InstanceSpec, shape: tuple[int, int, int]) -> InstanceSpec:
    """The instance with X (M, K), W (K, N), Y (M, N) (and a Bias) of this GEMM shape, each
    tensor keeping its dtype and its row/column-major layout."""
    m, n, k = shape
    dims = {"X": (m, k), "W": (k, n), "Y": (m, n), "Bias": (m, n)}
    tensors: dict[str, TensorSpec | None] = {}
    for name, t in spec.tensors.items():
        if t is None or name not in dims:
            tensors[name] = t
            continue
        if t.rank != 2:
            raise CandidateError(
                f"tune shapes need 2-D tensors; {name} has rank {t.rank} in '{spec.name}'"
            )
        new = dims[name]
        if t.stride == (0, 1):  # a row vector broadcast over M
            stride: tuple[int, ...] = (0, 1)
        elif t.stride[-1] == 1:
            stride = contiguous_strides(new)
        else:
            stride = column_major_strides(new)
        tensors[name] = TensorSpec(name, new, t.dtype, stride)
    return dataclasses.replace(spec, tensors=tensors)


def instance_shape(spec: InstanceSpec) -> tuple[int, int, int]:
    x, y = spec.tensors.get("X"), spec.tensors.get("Y")
    if x is None or y is None or x.rank < 2 or y.rank < 2:
        raise CandidateError("a GEMM instance needs tensors X and Y of rank >= 2")
    return (y.shape[-2], y.shape[-1], x.shape[-1])
