"""The config space `kls tune` searches for a flex instance (kls side of the torch worker's
`flex_tune` answer): Inductor's flex configs, each tried as it is, with USE_TMA on, with the
promises the instance's mask keeps (all of them together) on, and with both; a promise the
mask breaks is not offered, and a note says where it breaks. (An instance whose own config
turns a flag on keeps it on; a tune table may list `USE_TMA = [false, true]`.)"""

from __future__ import annotations

from typing import Any

from kls.instances.schema import InstanceSpec
from kls.profiles.base import ConfigSpace, ConfigSpaceError
from kls.profiles.triton.client import shared_worker
from kls.profiles.triton.flex_parts import concatenation
from kls.profiles.triton.flex_render import flex_request, missing_qkv, qkv_of

TMA = "USE_TMA"


def flag_sets(kept: list[str]) -> list[dict[str, Any]]:
    """Overlays that turn flags on: none, USE_TMA, every kept promise, both (a config's own
    flags stand where an overlay leaves them, so the first is the config itself)."""
    promises: list[dict[str, Any]] = [{}]
    if kept:
        promises.append(dict.fromkeys(kept, True))
    return [{**tma, **made} for tma in ({}, {TMA: True}) for made in promises]


def flex_space(instance: InstanceSpec, op: str, exhaustive: bool) -> ConfigSpace:
    """The flex instance's space, from one torch-worker request (raises WorkerUnavailable
    where there is no torch worker, ConfigSpaceError where it cannot answer)."""
    if qkv_of(instance) is None:
        raise ConfigSpaceError(f"{instance.name}: {missing_qkv(op)}")
    try:
        text = concatenation(instance, op, {}).text
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigSpaceError(f"cannot read the {op} template's parts: {exc}") from exc
    request = {**flex_request(instance, op, text), "kind": "flex_tune", "exhaustive": exhaustive}
    answer = shared_worker().render(request)
    error = answer.get("error")
    if error:
        raise ConfigSpaceError(str(error.get("message", error)))
    breaks: dict[str, str | None] = answer.get("promises", {})
    kept = [name for name, why in breaks.items() if why is None]
    notes = [
        f"{name} is not offered: the mask breaks it ({why})" for name, why in breaks.items() if why
    ]
    if answer.get("undecided"):
        notes.append(f"no promise is offered: {answer['undecided']}")
    configs = list(answer.get("configs", []))
    return ConfigSpace(configs, flag_sets(kept), notes, complete=True)
