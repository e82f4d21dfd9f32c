"""An instance's op list: its profile's verdict on every generated op (accepted, or refused
with the reason), cached per (instance signature, level) in memory and on disk, since listing
level "2222" takes seconds. `kls ops`, the op "did you mean" and kls.toml's op completion
read it."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kls.cache_dir import cache_dir, write_atomic
from kls.cutlass.ops import DEFAULT_LEVEL, cutlass_version, resolve_op_name
from kls.instances.schema import InstanceSpec
from kls.profiles.base import OpChoice, Profile, Verdict
from kls.profiles.common import wants_3x


@dataclass(frozen=True)
class OpList:
    """Every generated op, in generator order: accepted ones as choices, refused with why."""

    signature: str
    level: str
    accepted: tuple[OpChoice, ...]
    refused: tuple[tuple[str, str], ...]  # (op, reason)

    def names(self) -> list[str]:
        return [c.op for c in self.accepted]


def signature(spec: InstanceSpec, level: str | None = None) -> str:
    """What an op list depends on: profile, arch, the GEMM tensors, the template's GEMM
    generation (its current op's), the torch source and the level (not the op's name)."""
    tensors = {
        n: [t.dtype.name, list(t.shape), list(t.stride), t.offset] if t is not None else None
        for n, t in sorted(spec.tensors.items())
    }
    parts: list[Any] = [spec.profile, spec.kind, spec.arch, spec.sm, tensors]
    parts += [wants_3x(spec), str(spec.torch_package), level or spec.instantiation_level]
    text = json.dumps([cutlass_version(), *parts], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


_LOCK = threading.Lock()
# The registry's lookup, set by kls.profiles when it loads (its packages import this module).
profile_of: Callable[[str], Profile] | None = None


def op_list(spec: InstanceSpec, level: str | None = None) -> OpList:
    """The instance's op list (ConfigProblem when its profile has none)."""
    level = level or spec.instantiation_level or DEFAULT_LEVEL
    key = signature(spec, level)
    found = _remembered(key)
    if found is not None:
        return found
    with _LOCK:
        found = _remembered(key) or _read(key, level)
        if found is None:
            assert profile_of is not None, "kls.profiles registers itself on import"
            found = _build(key, level, profile_of(spec.profile).op_verdicts(spec, level))
            _write(found)
        _MEMORY[key] = found
        while len(_MEMORY) > 16:
            del _MEMORY[next(iter(_MEMORY))]
    return found


_MEMORY: dict[str, OpList] = {}


def remembered(spec: InstanceSpec, level: str | None = None) -> OpList | None:
    """The instance's op list if this process holds it already (a completion never waits)."""
    level = level or spec.instantiation_level or DEFAULT_LEVEL
    return _remembered(signature(spec, level))


def _remembered(key: str) -> OpList | None:
    return _MEMORY.get(key)


def _build(key: str, level: str, verdicts: Any) -> OpList:
    accepted: list[OpChoice] = []
    refused: list[tuple[str, str]] = []
    for v in verdicts:
        assert isinstance(v, Verdict)
        if v.choice is not None:
            accepted.append(v.choice)
        else:
            refused.append((v.op, v.reason))
    return OpList(key, level, tuple(accepted), tuple(refused))


def _path(key: str) -> Any:
    return cache_dir("cutlass", cutlass_version(), "op-lists") / f"{key}.json"


def _write(found: OpList) -> None:
    reasons = sorted({r for _, r in found.refused})
    index = {r: i for i, r in enumerate(reasons)}
    data = {
        "accepted": [list(c.__dict__.values()) for c in found.accepted],
        "reasons": reasons,
        "refused": [[n, index[r]] for n, r in found.refused],
    }
    write_atomic(_path(found.signature), json.dumps(data).encode())


def _read(key: str, level: str) -> OpList | None:
    try:
        data = json.loads(_path(key).read_text())
        reasons = data["reasons"]
        accepted = tuple(OpChoice(*c) for c in data["accepted"])
        refused = tuple((n, reasons[i]) for n, i in data["refused"])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return OpList(key, level, accepted, refused)


def suggest_op(spec: InstanceSpec, name: str) -> str | None:
    """The "did you mean" for an unknown op `name`, drawn from the ops the instance's profile
    accepts for its tensors (never a bf16 op for f16 tensors); None without an op list."""
    from kls.suggest import did_you_mean

    try:
        names = op_list(spec).names()
    except Exception:  # no op list for this instance: the generic suggestion stays
        return None
    return did_you_mean(name, names, cutoff=0.5) or (
        " (no op Inductor accepts for these tensors is close: `kls ops` lists them)"
    )


def op_name(instance: InstanceSpec) -> str:
    """The instance's CUTLASS op: named, or the first match of its filter."""
    return resolve_op_name(
        instance.op,
        instance.op_filter.contains if instance.op_filter else (),
        instance.op_filter.arch or instance.arch if instance.op_filter else instance.arch,
        instance.instantiation_level,
        lambda name: suggest_op(instance, name),
    )
