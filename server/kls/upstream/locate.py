"""Find the torch source, in this order, without importing torch:

1. what the user named for this run: `--torch-source` on the CLI, `kls.torchSource` in the
   editor (both trusted: a person chose them);
2. `KLS_TORCH_SOURCE` (a checkout, a `torch/` folder or a wheel; `none` turns the search off);
3. `[torch] source = "..."` in kls.toml (relative to its folder; ignored in an untrusted
   workspace, where the project's files may not point kls at other files);
4. `importlib.util.find_spec("torch")` in the interpreter that runs kls.

The first that is named decides: a named source that is not a torch source is a problem to
report, never a silent fall through to the next.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kls.upstream.source import TorchSource, TorchSourceError, open_source

ENV = "KLS_TORCH_SOURCE"
OFF = "none"


@dataclass(frozen=True)
class Located:
    source: TorchSource | None
    looked: tuple[str, ...] = ()  # where kls looked, in order, for the message
    problem: str | None = None  # a named source that is not one
    off: bool = False  # KLS_TORCH_SOURCE=none

    def not_found_message(self) -> str:
        """What to say when an instance needs the source and there is none."""
        if self.problem:
            return self.problem
        if self.off:
            return f"the torch-source search is off ({ENV}=none)"
        looked = "; ".join(self.looked) or "nowhere"
        return (
            f"no torch source found (looked at: {looked}); point kls at one with {ENV}=PATH, "
            '[torch] source = "PATH" in kls.toml, --torch-source PATH or the kls.torchSource '
            "setting (a PyTorch checkout, an installed torch/ folder, or a torch wheel)"
        )


@dataclass
class _Cache:
    found: dict[tuple[str | None, ...], Located] = field(default_factory=dict)


_CACHE = _Cache()
_explicit: str | None = None


def set_explicit(value: str | None) -> None:
    """The source a person named for this process (CLI flag, editor setting)."""
    global _explicit
    _explicit = value or None


def locate(config_value: str | None = None, config_dir: Path | None = None) -> Located:
    """The torch source for a config whose `[torch] source` is `config_value` (None: not set
    or not trusted)."""
    env = os.environ.get(ENV)
    config = str((config_dir or Path.cwd()) / config_value) if config_value else None
    # The cache folder is part of the key: a wheel is unpacked under it.
    key = (_explicit, env, config, os.environ.get("KLS_CACHE_DIR"))
    cached = _CACHE.found.get(key)
    if cached is None:
        cached = _search(_explicit, env, config)
        _CACHE.found[key] = cached
    return cached


def forget() -> None:
    """Drop remembered results (a setting changed, a test moved a source)."""
    _CACHE.found.clear()


def _search(explicit: str | None, env: str | None, config: str | None) -> Located:
    looked: list[str] = []
    for what, value in (
        ("the torch-source setting", explicit),
        (ENV, env),
        ("[torch] source in kls.toml", config),
    ):
        if value is None or not value.strip():
            continue
        if value.strip().lower() == OFF:
            return Located(None, (f"{what}=none",), off=True)
        try:
            return Located(open_source(Path(value).expanduser()), (f"{what}: {value}",))
        except TorchSourceError as exc:
            return Located(None, (f"{what}: {value}",), problem=f"{what} names {exc}")
    looked.append(f"{ENV} (not set)")
    looked.append("[torch] source in kls.toml (not set)")
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    looked.append(
        f"find_spec('torch') in {sys.executable}: "
        + (", ".join(locations) if locations else "not installed")
    )
    for location in locations:
        try:
            return Located(open_source(Path(location)), tuple(looked))
        except TorchSourceError:
            continue
    return Located(None, tuple(looked))
