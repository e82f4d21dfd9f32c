"""The sandbox's allowlist: a template reaches exactly the documented API, never internals.

Jinja's `SandboxedEnvironment` only hides underscore names and a few function internals; any
other attribute of any object is reachable. That let a template walk from `kernel` to kls's
bookkeeping and from there to an unsandboxed Jinja environment. Here the rule is inverted:

- an object of a class that declares `TEMPLATE_API` (the runtime's `kernel`, `template`,
  buffers, helper results) exposes exactly those names;
- plain values (strings, numbers, lists, dicts, ...) and Jinja's own template-level objects
  (loops, macros, cyclers, namespaces, undefined) keep the sandbox's default rules;
- everything else exposes nothing.

Arithmetic that can allocate without bound in one C call (`'x' * 10**9`, `10 ** 10 ** 9`) is
intercepted and refused before it runs; everything else is bounded by the worker's limits.
"""

from __future__ import annotations

import operator
from typing import Any, ClassVar, Protocol, runtime_checkable

import jinja2
import markupsafe
from jinja2.environment import TemplateModule
from jinja2.runtime import BlockReference, LoopContext, Macro, TemplateReference, Undefined
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import Cycler, Joiner, Namespace


@runtime_checkable
class TemplateFacing(Protocol):
    """A class whose instances templates see; `TEMPLATE_API` lists what they may use."""

    TEMPLATE_API: ClassVar[frozenset[str]]


PLAIN_VALUES: tuple[type, ...] = (
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
    list,
    tuple,
    dict,
    set,
    frozenset,
    range,
    markupsafe.Markup,
)
# Jinja's own template-level objects: their public attributes are part of the language.
JINJA_VALUES: tuple[type, ...] = (
    Undefined,
    LoopContext,
    Macro,
    Cycler,
    Joiner,
    Namespace,
    TemplateReference,
    BlockReference,
    TemplateModule,  # `{% import 'm.cuh.jinja' as m %}`: its macros and exported names
)
# Bounds for intercepted operators: more than this is a template bug, not a kernel.
MAX_SEQUENCE_ITEMS = 16 * 1024 * 1024
MAX_POWER_BITS = 1 << 16


class SandboxLimit(Exception):
    """An operation the sandbox refuses because its result would be unbounded."""


def template_api(obj: Any) -> frozenset[str] | None:
    """The allowlist of `obj`'s class, or None when it declares none."""
    api = getattr(type(obj), "TEMPLATE_API", None)
    return api if isinstance(api, frozenset) else None


class AllowlistSandbox(SandboxedEnvironment):
    """A Jinja sandbox that lets templates reach only allowlisted API and plain values."""

    intercepted_binops = frozenset(["*", "**"])

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        api = template_api(obj)
        if api is not None:
            return attr in api
        if isinstance(obj, type):
            return False  # classes (`cycler`, `namespace`) are callable, not browsable
        return isinstance(obj, PLAIN_VALUES + JINJA_VALUES)

    def is_safe_callable(self, obj: Any) -> bool:
        if not super().is_safe_callable(obj):
            return False
        return not isinstance(obj, (jinja2.Environment, jinja2.Template))

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
            return operator.mul(left, right)
        if operator_ == "**":
            _check_power(left, right)
            return operator.pow(left, right)
        return super().call_binop(context, operator_, left, right)


def _check_repeat(sequence: Any, count: Any) -> None:
    """`seq * n` allocates len(seq) * n items in one uninterruptible step."""
    if isinstance(sequence, (str, bytes, list, tuple)) and isinstance(count, int):
        total = len(sequence) * count
        if total > MAX_SEQUENCE_ITEMS:
            raise SandboxLimit(
                f"'{type(sequence).__name__} * {count}' would make {total:,} items "
                f"(the sandbox allows {MAX_SEQUENCE_ITEMS:,})"
            )


def _check_power(base: Any, exponent: Any) -> None:
    """`a ** b` on integers can run for minutes inside one C call."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        bits = max(abs(base).bit_length(), 1) * exponent
        if abs(base) > 1 and bits > MAX_POWER_BITS:
            raise SandboxLimit(
                f"'{base} ** {exponent}' would have about {bits:,} bits "
                f"(the sandbox allows {MAX_POWER_BITS:,})"
            )
