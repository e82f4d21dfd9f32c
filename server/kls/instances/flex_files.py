"""Which files a flex attention instance reads. Inductor registers each flex template as a
concatenation of files: the forward is `flex_attention.py.jinja + utilities.py.jinja +
common.py.jinja` (decode: `flex_decode` first; backward: `flex_backwards + utilities`). An
instance names the first; the others are read beside it, so an edit to any of them re-renders
the instance."""

from __future__ import annotations

from pathlib import Path

from kls.instances.schema import InstanceSpec

# Inductor's flex templates by registered name: the files it concatenates, in order.
FLEX_PARTS: dict[str, tuple[str, ...]] = {
    "flex_attention": ("flex_attention", "utilities", "common"),
    "flex_decoding": ("flex_decode", "utilities", "common"),
    "flex_attention_backward": ("flex_backwards", "utilities"),
}
SUFFIX = ".py.jinja"


def flex_op(instance: InstanceSpec) -> str | None:
    """The flex template an instance renders (its inductor_template, else its template's file
    name), or None for any other template."""
    if instance.inductor_template is not None:
        return instance.inductor_template if instance.inductor_template in FLEX_PARTS else None
    name = Path(instance.template).name
    return next((op for op, parts in FLEX_PARTS.items() if name == parts[0] + SUFFIX), None)


def part_paths(instance: InstanceSpec, op: str) -> list[Path]:
    """The files of `op`'s template, the instance's own template first, the others beside it."""
    first = Path(instance.template)
    return [first] + [first.with_name(name + SUFFIX) for name in FLEX_PARTS[op][1:]]
