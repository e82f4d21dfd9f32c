"""Inductor's own files, read in place from the user's torch source (never stored here)."""

from kls.upstream.locate import ENV, Located, locate, set_explicit
from kls.upstream.source import TorchSource, TorchSourceError, major_minor, open_source

__all__ = [
    "ENV",
    "Located",
    "TorchSource",
    "TorchSourceError",
    "locate",
    "major_minor",
    "open_source",
    "set_explicit",
]
