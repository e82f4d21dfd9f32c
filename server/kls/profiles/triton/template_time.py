"""The render time limit for a Triton template's own code, in the torch worker.

kls's CUDA renders run under an alarm that raises inside the template (kls.sandbox.child), so a
runaway loop is a KT104 at its line after the limit (`--render-timeout`, `kls.renderTimeout`).
Inductor's render of a Triton template spends most of its time in Inductor's lowering, which a
few seconds would cut short on a first render; only the template's own code gets the limit:
each `render()` of the Jinja template arms the alarm with what is left of the request's budget
(Inductor renders one template more than once). The worker's client keeps its own deadline
for the whole request (kls.profiles.triton.client.RENDER_SECONDS).
"""

from __future__ import annotations

import signal
import time
from typing import Any


class TemplateTimeLimit(Exception):
    """Raised by the alarm inside the template's code: the traceback names its line."""


class _Budget:
    seconds: float | None = None  # None: no limit for this request
    left: float = 0.0


_BUDGET = _Budget()


def start_budget(seconds: Any) -> None:
    """A new request's limit for its template's code (a number of seconds, or none)."""
    valid = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0
    _BUDGET.seconds = float(seconds) if valid else None
    _BUDGET.left = _BUDGET.seconds or 0.0


def install_alarm() -> None:
    signal.signal(signal.SIGALRM, _on_alarm)


def _on_alarm(signum: int, frame: Any) -> None:
    raise TemplateTimeLimit(
        f"the template's own code ran past the render limit of {_BUDGET.seconds:g} s and was "
        "stopped; is a loop unbounded? (the limit: kls check --render-timeout, or the editor's "
        "kls.renderTimeout)"
    )


class TimedTemplate:
    """A Jinja template whose `render` runs under the request's budget; every other attribute
    is the template's own."""

    def __init__(self, template: Any) -> None:
        self._template = template

    def render(self, *args: Any, **kwargs: Any) -> Any:
        if _BUDGET.seconds is None:
            return self._template.render(*args, **kwargs)
        if _BUDGET.left <= 0:
            _on_alarm(signal.SIGALRM, None)
        started = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, _BUDGET.left)
        try:
            return self._template.render(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _BUDGET.left -= time.monotonic() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._template, name)
