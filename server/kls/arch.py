"""Compute capabilities a kls.toml `arch` may name: what nvcc's `-gencode arch=compute_X`
accepts (nvcc 12.x/13.x), so a typo is reported on its own line instead of by nvcc."""

from __future__ import annotations

import re

from kls.suggest import did_you_mean

# SM numbers nvcc 12.x/13.x build for (13.0 dropped everything below 75).
KNOWN_SM = (70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121)
ARCH = re.compile(r"^(?P<sm>\d{2,3})(?P<suffix>[af]?)$")
FORMS = (
    'digits of the compute capability, e.g. "80", "89", "90a" (Hopper\'s wgmma/TMA), '
    "\"100a\"; 'a' (arch-specific) from 90 on, 'f' (family) from 100 on"
)


def valid_archs() -> list[str]:
    out: list[str] = []
    for sm in KNOWN_SM:
        out.append(str(sm))
        if sm >= 90:
            out.append(f"{sm}a")
        if sm >= 100:
            out.append(f"{sm}f")
    return out


def arch_problem(value: str) -> str | None:
    """None when `value` is an arch nvcc accepts, else the message (valid forms included)."""
    text = value.strip().lower()
    for prefix in ("sm_", "compute_", "sm"):
        if text.startswith(prefix) and ARCH.match(text[len(prefix) :]):
            return f"arch '{value}': write the bare number, '{text[len(prefix) :]}' ({FORMS})"
    m = ARCH.match(text)
    if m is not None:
        sm, suffix = int(m.group("sm")), m.group("suffix")
        if sm in KNOWN_SM and (not suffix or (suffix == "a" and sm >= 90) or sm >= 100):
            return None
    hint = did_you_mean(text, valid_archs())
    return f"arch '{value}' is not a compute capability nvcc builds for{hint}; {FORMS}"
