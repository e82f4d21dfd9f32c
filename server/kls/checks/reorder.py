"""kls.toml's `input_reorder` against the def_kernel calls a render made.

`input_reorder` in kls.toml says in which order the caller passes the inputs; def_kernel puts
the C parameters in that order only when it is given the same list. A template that calls
def_kernel without it (or with another list) builds a kernel whose parameters the caller fills
with the wrong buffers. When kls itself calls def_kernel (torch 2.11's GEMMs, as Inductor
does before rendering), a reorder that does not fit is the config's mistake, not the template's.
"""

from __future__ import annotations

from kls.findings import Finding, Related, Severity
from kls.positions import Range
from kls.render import RenderResult
from kls.runtime.record import RuntimeFinding

REORDER_CODES = ("KT202", "KT203")


def reorder_findings(result: RenderResult) -> tuple[list[Finding], list[RuntimeFinding]]:
    """The findings about kls.toml's input_reorder line, and the render's runtime findings
    less those moved there."""
    instance = result.instance
    wanted = list(instance.input_reorder) if instance.input_reorder is not None else None
    if wanted is None:
        return [], list(result.findings)
    where = instance.reorder_range or Range.of_line(instance.line)
    config = str(instance.config_path)
    out: list[Finding] = []
    kept: list[RuntimeFinding] = []
    for f in result.findings:
        if f.code in REORDER_CODES and f.site is None:  # kls's own def_kernel call
            out.append(Finding(f.code, f.severity, where, f"kls.toml: {f.message}", config))
        else:
            kept.append(f)
    for call in result.calls:
        if (call.owner, call.helper) != ("kernel", "def_kernel") or call.site is None:
            continue
        passed = call.args[3] if len(call.args) > 3 else call.kwargs.get("input_reorder")
        passed = list(passed) if isinstance(passed, (list, tuple)) else passed
        if passed == wanted:
            continue
        at = f"{call.site.path}:{call.site.line + 1}"
        given = "without input_reorder" if passed is None else f"with input_reorder {passed}"
        out.append(
            Finding(
                "KT214",
                Severity.ERROR,
                where,
                f"input_reorder = {wanted} says the caller passes the inputs in that order, "
                f"but def_kernel ({at}) is called {given}, so its C parameters are in another "
                "order and take the wrong buffers: pass input_reorder=input_reorder to "
                "def_kernel, or remove input_reorder from kls.toml",
                config,
                related=(
                    Related(call.site.path, Range.of_line(call.site.line), "the def_kernel call"),
                ),
            )
        )
    return out, kept
