"""A finding: one rule violation with a code, a severity, an exact range and a message."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from kls.positions import Range


class Severity(enum.IntEnum):
    ERROR = 1
    WARNING = 2
    INFO = 3
    HINT = 4

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Related:
    """A secondary location that explains a finding (another file or another line)."""

    path: str
    range: Range
    message: str


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    range: Range
    message: str
    path: str = ""
    instance: str | None = None
    source: str = "kls"
    related: tuple[Related, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "code": self.code,
            "severity": self.severity.label,
            "range": self.range.to_json(),
            "message": self.message,
            "instance": self.instance,
            "source": self.source,
            "related": [
                {"path": r.path, "range": r.range.to_json(), "message": r.message}
                for r in self.related
            ],
        }

    def format_line(self) -> str:
        """Compiler-style `path:line:col: CODE severity: message`, 1-based for people."""
        where = f"{self.path}:{self.range.start.line + 1}:{self.range.start.column + 1}"
        tag = f" [{self.instance}]" if self.instance else ""
        return f"{where}: {self.code} {self.severity.label}: {self.message}{tag}"
