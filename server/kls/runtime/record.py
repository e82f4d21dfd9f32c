"""The record of every helper call a render made, with the template position that made it."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from kls.findings import Severity


@dataclass(frozen=True)
class Site:
    """A template file and 0-based line."""

    path: str
    line: int


@dataclass
class CallRecord:
    owner: str
    helper: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    site: Site | None
    result: str | None = None
    sequence: int = 0


@dataclass(frozen=True)
class RuntimeFinding:
    """A finding the runtime raised while rendering, located at the call that caused it."""

    code: str
    severity: Severity
    message: str
    site: Site | None
    helper: str | None = None
    arg_index: int | None = None  # which argument of the call to underline


class RenderAbort(Exception):
    """Raised where Inductor would raise: the render stops, the finding explains why."""

    def __init__(self, finding: RuntimeFinding) -> None:
        super().__init__(finding.message)
        self.finding = finding


@dataclass
class Recorder:
    """Collects calls and findings; maps Python frames of compiled templates to template lines."""

    code_to_template: dict[str, Any] = field(default_factory=dict)  # co_filename -> jinja Template
    calls: list[CallRecord] = field(default_factory=list)
    findings: list[RuntimeFinding] = field(default_factory=list)

    def site(self) -> Site | None:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            template = self.code_to_template.get(frame.f_code.co_filename)
            if template is not None:
                line = template.get_corresponding_lineno(frame.f_lineno)
                return Site(frame.f_code.co_filename, max(line - 1, 0))
            frame = frame.f_back
        return None

    def call(self, owner: str, helper: str, *args: Any, **kwargs: Any) -> CallRecord:
        record = CallRecord(owner, helper, args, kwargs, self.site(), sequence=len(self.calls))
        self.calls.append(record)
        return record

    def add(
        self,
        code: str,
        severity: Severity,
        message: str,
        record: CallRecord | None,
        arg_index: int | None = None,
    ) -> RuntimeFinding:
        finding = RuntimeFinding(
            code,
            severity,
            message,
            record.site if record else self.site(),
            record.helper if record else None,
            arg_index,
        )
        self.findings.append(finding)
        return finding

    def abort(
        self, code: str, message: str, record: CallRecord | None, arg_index: int | None = None
    ) -> RenderAbort:
        return RenderAbort(self.add(code, Severity.ERROR, message, record, arg_index))
