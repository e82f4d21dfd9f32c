"""The one way kls steps into Inductor's lowering: while `answering(fn)` is active, every
`TritonTemplate.generate(template, **kwargs)` the lowering makes is answered by
`fn(original, template, **kwargs)`, where `original` is Inductor's own generate. The
lowering's callers use it to pin the instance's config (`lowering._Pin`), to record the
configs it asks for without rendering any (`lowering._Record`), and to stop it at the first
flex choice (`flex.capture`). Torch worker only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

Answer = Callable[..., Any]  # (original generate, template, **kwargs) -> a choice or None


@contextlib.contextmanager
def answering(answer: Answer) -> Iterator[None]:
    from torch._inductor.select_algorithm import TritonTemplate

    original = TritonTemplate.generate

    def generate(template: Any, *args: Any, **kwargs: Any) -> Any:
        return answer(original, template, *args, **kwargs)

    TritonTemplate.generate = generate  # type: ignore[method-assign]
    try:
        yield
    finally:
        TritonTemplate.generate = original  # type: ignore[method-assign]
