"""Planning a tune: the space (kls.toml's tune table), the candidates, the shapes, the
instance's own op, and the result they start."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from kls.instances import InstanceSpec
from kls.profiles import profile
from kls.tune.candidates import (
    BuildUnit,
    CandidateError,
    CandidateSet,
    compatible_ops,
    instance_shape,
    make_candidates,
    unit_id,
)
from kls.tune.options import TuneError, TuneOptions
from kls.tune.results import BuildRecord, TuneResult, shape_key
from kls.tune.space import (
    TuneSpace,
    TuneSpaceError,
    load_space,
    runtime_variables,
    unread_variables,
)


@dataclass
class Plan:
    """What a tune builds and times: `units` are the candidates' builds, with the instance's
    own op added when the candidates leave it out (`current`)."""

    space: TuneSpace
    candidates: CandidateSet
    shapes: list[tuple[int, int, int]]
    units: list[BuildUnit]
    current: BuildUnit | None

    @property
    def keys(self) -> list[str]:
        return [shape_key(s) for s in self.shapes]


def make_plan(spec: InstanceSpec, limit: int | None) -> Plan:
    try:
        space = load_space(spec)
        cs = make_candidates(spec, space, limit)
        shapes = list(space.shapes) or [instance_shape(spec)]
    except (TuneSpaceError, CandidateError) as exc:
        raise TuneError(str(exc)) from None
    current = current_unit(spec, cs)
    units = list(cs.units)
    if current is not None and all(u.id != current.id for u in units):
        units.append(current)  # the margin over the current choice is always measured
    return Plan(space, cs, shapes, units, current)


def current_unit(spec: InstanceSpec, cs: CandidateSet) -> BuildUnit | None:
    """The instance's own op with its own build variables, if it has one."""
    op = spec.op
    if op is None:
        return None
    build_vars = {
        k: spec.variables[k]
        for k in (cs.units[0].build_vars if cs.units else {})
        if k in spec.variables
    }
    for u in cs.units:
        if u.choice.op == op and u.build_vars == build_vars:
            return u
    for c in compatible_ops(spec):
        if c.op == op:
            return BuildUnit(unit_id(c.op, build_vars), c, build_vars)
    return None


def start_result(
    spec: InstanceSpec, options: TuneOptions, plan: Plan, rendered_hash: str
) -> TuneResult:
    """The result before anything is built: the plan, a record per build, the method."""
    cs, current = plan.candidates, plan.current
    result = TuneResult(
        spec.name,
        str(spec.template),
        str(spec.config_path),
        options.executor,
        time.time(),
        plan.keys,
        candidates=len(cs.units) * len(cs.runtime_combos),
        compatible_ops=cs.total_ops,
        distinct_ops=cs.distinct_ops,
        selected_ops=cs.filtered_ops,
        runtime_combos=cs.runtime_combos,
        build_only=options.build_only,
        source_hash=rendered_hash,
        runtime_space=dict(cs.runtime_space),
    )
    for name in unread_variables(spec, plan.space):
        result.notes.append(
            f"the tune table's '{name}' is not read by the instance's templates (a typo?): "
            "its values all build the same kernel"
        )
    result.builds = [
        BuildRecord(
            u.id, u.choice.op, u.choice.conf_name, u.choice.family, u.choice.tile,
            dict(u.build_vars), current=current is not None and u.id == current.id,
            level=u.choice.level,
        )
        for u in plan.units
    ]  # fmt: skip
    result.method = {
        "stage1_timing": dataclasses.asdict(options.stage1),
        "stage2_timing": dataclasses.asdict(options.stage2),
        "stage2_per_shape": options.stage2_per_shape,
        "stage2_ops": options.stage2_ops,
        "limit": options.limit,
        "cutlass_instantiation_level": plan.space.level or spec.instantiation_level,
    }
    return result


def own_values(spec: InstanceSpec, names: Any) -> dict[str, Any]:
    """The instance's own values of `names`: its variables, and for a runtime variable it
    leaves unset the value its render passes (so its current choice is found and measured)."""
    runtime = runtime_variables(spec)
    defaults = profile(spec.profile).runtime_defaults(spec)
    out: dict[str, Any] = {}
    for name in names:
        if name in spec.variables:
            out[name] = spec.variables[name]
        elif name in runtime and name in defaults:
            out[name] = defaults[name]
    return out
