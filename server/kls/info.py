"""`kls info`: which torch source kls reads, from where, and whether its profiles mirror it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from kls import __version__
from kls.upstream.locate import ENV, Located, locate
from kls.upstream.source import major_minor


def _located_for(config: Path | None) -> Located:
    value = _config_torch_source(config) if config is not None else None
    return locate(value, config.parent if config is not None else None)


def _config_torch_source(config: Path) -> str | None:
    """`[torch] source` of a config, read without the instance loader (which needs more)."""
    from kls.instances.load import torch_source_of

    return torch_source_of(config)


def info_record(config: Path | None) -> dict[str, Any]:
    from kls.profiles import PROFILES

    located = _located_for(config)
    source = located.source
    return {
        "kls": __version__,
        "python": sys.executable,
        "config": str(config) if config else None,
        "env": {ENV: os.environ.get(ENV)},
        "torch_source": None
        if source is None
        else {
            "kind": source.kind,
            "origin": str(source.origin),
            "package": str(source.package),
            "version": source.version,
        },
        "looked": list(located.looked),
        "problem": None if source is not None else located.not_found_message(),
        "profiles": {
            p.name: {
                "mirrors": p.mirrors,
                "torch_versions": [f"{a}.{b}" for a, b in p.torch_versions],
                "matches_source": None
                if source is None or not p.torch_versions
                else major_minor(source.version) in p.torch_versions,
            }
            for p in PROFILES.values()
        },
    }


def info_lines(config: Path | None) -> list[str]:
    record = info_record(config)
    lines = [f"kls {record['kls']} on {record['python']}"]
    if record["config"]:
        lines.append(f"config: {record['config']}")
    source = record["torch_source"]
    if source is None:
        lines.append(f"torch source: none: {record['problem']}")
    else:
        lines.append(
            f"torch source: torch {source['version']} ({source['kind']}: {source['origin']})"
        )
        if source["package"] != source["origin"]:
            lines.append(f"  read from: {source['package']}")
    lines.append("  looked at: " + "; ".join(record["looked"]))
    for name, p in record["profiles"].items():
        versions = ", ".join(p["torch_versions"]) or "any"
        match = p["matches_source"]
        note = (
            "" if match is None else (" (matches the source)" if match else " (the source differs)")
        )
        lines.append(f"profile {name}: mirrors {p['mirrors']}; torch {versions}{note}")
    return lines
