"""The profiles kls knows: one package each, one line each in `REGISTRY`.

A profile is one template family and API generation (kls.profiles.base.Profile says what it
provides). Render, checks, bench, tune and the language server find a profile here by the name
an instance gives and call its interface; nothing else tests a profile's name. A new profile is
a package beside these and one `register` line below (docs/PROFILES.md).
"""

from __future__ import annotations

from kls.instances.schema import RENAMED_PROFILES
from kls.profiles import inductor2023, op_list, torch211, triton
from kls.profiles.base import ConfigProblem, OpChoice, Profile, RenderSession, Verdict
from kls.profiles.torch211 import scheduler as torch211_scheduler

PROFILES: dict[str, Profile] = {}


def register(new: Profile) -> Profile:
    """Make `new` known by its name (a second profile of that name replaces the first)."""
    PROFILES[new.name] = new
    return new


register(inductor2023.PROFILE)
register(torch211.PROFILE)
register(torch211_scheduler.PROFILE)
register(triton.PROFILE)

DEFAULT = inductor2023.PROFILE.name
op_list.profile_of = lambda name: profile(name)


def profile(name: str) -> Profile:
    """The profile `name` names (or the one an old name was renamed to); KeyError if none."""
    return PROFILES[RENAMED_PROFILES.get(name, name)]


def names() -> tuple[str, ...]:
    return tuple(PROFILES)


__all__ = [
    "DEFAULT",
    "PROFILES",
    "ConfigProblem",
    "OpChoice",
    "Profile",
    "RenderSession",
    "Verdict",
    "names",
    "profile",
]
