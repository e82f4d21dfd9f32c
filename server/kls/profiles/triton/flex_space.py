"""The config space `kls tune` searches for a flex instance (kls side of the torch worker's
`flex_tune` answer): Inductor's flex configs, each tried as it is, with USE_TMA on, with the
promises the instance's mask keeps (all of them together) on, and with both; a promise the
mask breaks is not offered, and a note says where it breaks. (An instance whose own config
turns a flag on keeps it on; a tune table may list `USE_TMA = [false, true]`.)"""

from __future__ import annotations

from typing import Any

from kls.instances.schema import InstanceSpec
from kls.profiles.base import ConfigSpace
from kls.profiles.triton.client import WorkerUnavailable, shared_worker
from kls.profiles.triton.flex_parts import concatenation
from kls.profiles.triton.flex_render import flex_request

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
    with the worker's message where it cannot answer)."""
    text = concatenation(instance, op, {}).text
    request = {**flex_request(instance, op, text), "kind": "flex_tune", "exhaustive": exhaustive}
    answer = shared_worker().render(request)
    error = answer.get("error")
    if error:
        raise WorkerUnavailable(str(error.get("message", error)))
    breaks: dict[str, str | None] = answer.get("promises", {})
    kept = [name for name, why in breaks.items() if why is None]
    notes = [
        f"{name} is not offered: the mask breaks it ({why})" for name, why in breaks.items() if why
    ]
    return ConfigSpace(list(answer.get("configs", [])), flag_sets(kept), notes)
