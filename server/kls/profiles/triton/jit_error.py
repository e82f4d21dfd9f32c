"""Where in a rendered module Triton's compile failed.

Triton raises a CompilationError at each call on the way down: the outermost names the call in
the kernel (`at 145:20: ... forward_inner(`, the message ending in a caret), the innermost the
statement that failed, with the reason. Each one's `at L:C` counts from the start of its own
@triton.jit function's source, which is not always the kernel's (flex's helpers in
utilities.py.jinja and common.py.jinja are functions of their own). The innermost error's
function source is found in the module to give the module's line.
"""

from __future__ import annotations


def innermost_compile_error(exc: BaseException) -> BaseException:
    """The deepest Triton CompilationError under `exc` (`exc` itself when there is none)."""
    found = exc
    chain: BaseException | None = exc
    for _ in range(32):
        if chain is None:
            break
        if type(chain).__name__ in _COMPILATION_ERRORS and getattr(chain, "node", None):
            found = chain
        chain = chain.__cause__ or chain.__context__
    return found


_COMPILATION_ERRORS = frozenset(
    {"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct"}
)


def module_line(exc: BaseException, module: str) -> int | None:
    """The 0-based module line of a CompilationError: its function's source found in the module,
    plus the error's line in it; None when the source is not in the module."""
    src = getattr(exc, "src", None)
    line = getattr(getattr(exc, "node", None), "lineno", None)
    if not isinstance(src, str) or not isinstance(line, int) or not src.strip():
        return None
    start = module.find(src)
    if start < 0:
        # Triton's source of a function starts at its `def` (decorators dropped); match on
        # the first line alone when the whole text is not found verbatim.
        first = src.split("\n", 1)[0]
        start = module.find(first) if first.strip() else -1
        if start < 0:
            return None
    return module.count("\n", 0, start) + line - 1
