"""Checks that need only the template text (no instance): they run on every keystroke."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kls.checks.catalogue import rule
from kls.checks.signatures import BUFFER_HELPERS, HelperSig, helpers, with_params
from kls.findings import Finding
from kls.positions import Range
from kls.profiles import DEFAULT, PROFILES
from kls.runtime.kernel import NEEDS_DEF_KERNEL, swapped_message
from kls.suggest import did_you_mean
from kls.template.model import Argument, HelperCall, NameRef, TemplateModel


def finding(code: str, rng: Range, message: str, path: str) -> Finding:
    return Finding(code, rule(code).severity, rng, message, path=path)


Context = tuple[str, str]  # (profile, kind) of an instance that reads the template


def static_findings(
    model: TemplateModel, path: str, contexts: Sequence[Context] | None = None
) -> list[Finding]:
    """`contexts`: the (profile, kind) of every instance that reads the file; the rules that
    depend on the profile (KT208, KT301, KT305) hold for each. None: no instance reads it, so a
    helper of any profile is accepted and names are checked against the default profile's."""
    out: list[Finding] = []
    if model.syntax_error is not None:
        err = model.syntax_error
        out.append(finding("KT101", err.range, f"Jinja syntax error: {err.message}", path))
    seen: set[tuple[str, Range]] = set()
    todo: list[tuple[str | None, str | None]] = list(contexts or []) or [(None, None)]
    for profile, kind in todo:
        for f in _profile_findings(model, path, profile, kind):
            if (f.code, f.range) not in seen:
                seen.add((f.code, f.range))
                out.append(f)
    return out


def _profile_findings(
    model: TemplateModel, path: str, profile: str | None, kind: str | None
) -> Iterator[Finding]:
    for call in model.calls:
        yield from _helper_findings(call, path, profile)
    reserved = PROFILES[profile or DEFAULT].reserved_c_names(kind or "cuda")
    for call in model.calls_to("kernel", "def_kernel"):
        yield from _def_kernel_findings(model, call, path, reserved, instanced=kind is not None)
    yield from _before_def_kernel(model, path)


def _before_def_kernel(model: TemplateModel, path: str) -> Iterator[Finding]:
    """KT211 without an instance: a helper that needs the C names, written above the template's
    own def_kernel call (a macro may be defined above and called below: skip files with one)."""
    defs = model.calls_to("kernel", "def_kernel")
    if not defs or any(s.tag == "macro" for s in model.statements):
        return
    first = min(c.range.start for c in defs)
    for call in model.calls:
        if call.owner == "kernel" and call.helper in NEEDS_DEF_KERNEL and call.range.start < first:
            yield finding(
                "KT211",
                call.range,
                f"kernel.{call.helper} is called above def_kernel (line {first.line + 1}), when "
                "no buffer has a C name yet (Inductor returns nothing useful here); move it "
                "below the def_kernel call",
                path,
            )


def _helper_findings(call: HelperCall, path: str, profile: str | None) -> Iterator[Finding]:
    table = helpers(profile)
    sig = table.get((call.owner, call.helper))
    if sig is None:
        if call.called:
            names = [o_n[1] for o_n in table if o_n[0] == call.owner]
            hint = did_you_mean(call.helper, names)
            where = f"profile {profile}" if profile else "any profile"
            others = [  # (a profile with another's API is named by that one)
                p
                for p, facts in PROFILES.items()
                if p != profile
                and not facts.same_api_as
                and (call.owner, call.helper) in helpers(p)
            ]
            also = f" ({', '.join(others)} has it)" if others and profile else ""
            yield finding(
                "KT305",
                call.name_range,
                f"{call.owner}.{call.helper} is not a helper Inductor provides in {where}"
                f"{also}{hint}",
                path,
            )
        return
    if sig.alternatives and call.called:
        forms = [sig, *(with_params(sig, p) for p in sig.alternatives)]
        results = [list(_arity_findings(call, path, form)) for form in forms]
        yield from min(results, key=len)
        return
    yield from _arity_findings(call, path, sig)


def _arity_findings(call: HelperCall, path: str, sig: HelperSig) -> Iterator[Finding]:
    if call.helper in ("header", "globals") and call.followed_by != "getvalue":
        yield finding(
            "KT303",
            call.range,
            f"template.{call.helper}() returns an IndentedBuffer; write "
            f"template.{call.helper}().getvalue() or the output is the object's repr",
            path,
        )
    if not call.called:
        return
    positional = call.positional()
    names = [p.name for p in sig.params]
    required = [p.name for p in sig.params if p.required]
    bound = {p: i < len(positional) for i, p in enumerate(names)}
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword not in names:
                yield finding(
                    "KT301",
                    arg.range,
                    f"{sig.label} has no parameter "
                    f"'{arg.keyword}'{did_you_mean(arg.keyword, names)}",
                    path,
                )
            else:
                bound[arg.keyword] = True
    if len(positional) > len(names):
        yield finding(
            "KT301",
            positional[len(names)].range,
            f"{sig.label} takes at most {len(names)} argument(s), got {len(positional)}",
            path,
        )
    missing = [n for n in required if not bound.get(n)]
    if missing:
        yield finding(
            "KT301",
            call.range,
            f"{sig.label} is missing required argument(s): {', '.join(missing)}",
            path,
        )


def _def_kernel_findings(
    model: TemplateModel,
    call: HelperCall,
    path: str,
    reserved: frozenset[str],
    instanced: bool = False,
) -> Iterator[Finding]:
    inputs_arg, outputs_arg = call.arg(0, "inputs"), call.arg(1, "outputs")
    names_arg, reorder_arg = call.arg(2, "names_str"), call.arg(3, "input_reorder")
    inputs = inputs_arg.name_list(model.index) if inputs_arg else None
    outputs = outputs_arg.name_list(model.index) if outputs_arg else None
    names = _literal_names(names_arg)
    if inputs is not None and outputs is not None:
        buffers = inputs + outputs
        yield from _duplicates(buffers, path)
        if names is not None and names_arg is not None and len(names) != len(buffers):
            yield finding(
                "KT201",
                names_arg.value_range,
                f"names_str has {len(names)} name(s) but inputs + outputs list {len(buffers)} "
                f"buffer(s) ({', '.join(b.name or 'None' for b in buffers)}); give one name per "
                "buffer, inputs first, then outputs",
                path,
            )
        if names is not None and names_arg is not None and len(names) == len(buffers):
            yield from _swapped_names(model, names, names_arg, buffers, path)
        yield from _undeclared_uses(
            model, call, {b.name for b in buffers if b.name}, path, instanced
        )
    if names is not None and names_arg is not None:
        yield from _bad_names(model, names, names_arg, path, reserved)
    if inputs is not None and reorder_arg is not None:
        yield from _reorder(reorder_arg, len(inputs), path)


def _literal_names(arg: Argument | None) -> list[str] | None:
    if arg is None:
        return None
    try:
        value = arg.literal()
    except (ValueError, SyntaxError):
        return None
    if not isinstance(value, str):
        return None
    return [x.strip() for x in value.strip().split(",")]


def _name_ranges(model: TemplateModel, names: list[str], arg: Argument) -> list[Range]:
    """Each comma-separated name's own range inside the names_str literal; the whole literal
    for every name when the literal has escapes or a prefix kls does not map."""
    text = arg.value_text
    whole = [arg.value_range] * len(names)
    if len(text) < 2 or text[0] not in "'\"" or "\\" in text:
        return whole
    start = model.index.offset(arg.value_range.start) + 1
    out: list[Range] = []
    at = 0
    for piece in text[1:-1].split(","):
        name = piece.strip()
        lead = at + len(piece) - len(piece.lstrip())
        out.append(model.index.range(start + lead, start + lead + len(name)))
        at += len(piece) + 1
    return out if len(out) == len(names) else whole


def _swapped_names(
    model: TemplateModel, names: list[str], arg: Argument, buffers: list[NameRef], path: str
) -> Iterator[Finding]:
    """KT213: names_str names C parameters in inputs + outputs order; a name that is another
    listed buffer's own name means the parameter called so holds the wrong buffer's data."""
    positions = {ref.name: i for i, ref in enumerate(buffers) if ref.name is not None}
    for i, (name, rng) in enumerate(zip(names, _name_ranges(model, names, arg))):
        own = buffers[i].name
        other = positions.get(name)
        if own is None or name == own or other is None or other == i:
            continue
        yield finding("KT213", rng, swapped_message(name, own, i, len(names)), path)


def _duplicates(buffers: list[NameRef], path: str) -> Iterator[Finding]:
    seen: dict[str, NameRef] = {}
    for ref in buffers:
        if ref.name is None:
            continue
        if ref.name in seen:
            yield finding(
                "KT206",
                ref.range,
                f"buffer '{ref.name}' is listed twice in def_kernel; Inductor keeps one C "
                "parameter (at the first position, named after the last)",
                path,
            )
        seen[ref.name] = ref


def _bad_names(
    model: TemplateModel, names: list[str], arg: Argument, path: str, reserved: frozenset[str]
) -> Iterator[Finding]:
    start = model.index.offset(arg.value_range.start)
    text = arg.value_text
    for name in names:
        at = text.find(name) if name else -1
        rng = model.index.range(start + at, start + at + len(name)) if at > 0 else arg.value_range
        if not name.isidentifier():
            yield finding(
                "KT207",
                rng,
                f"'{name}' in names_str is not a valid C identifier",
                path,
            )
        elif name in reserved:
            shown = ", ".join(sorted(reserved)[:8])
            yield finding(
                "KT208",
                rng,
                f"'{name}' in names_str collides with a name the signature or the template's C "
                f"code declares ({shown}, ...); rename the parameter",
                path,
            )


def _reorder(arg: Argument, n_inputs: int, path: str) -> Iterator[Finding]:
    try:
        order = arg.literal()
    except (ValueError, SyntaxError):
        return
    if order is None:
        return
    if not isinstance(order, (list, tuple)) or not all(isinstance(i, int) for i in order):
        return
    if len(order) != n_inputs:
        yield finding(
            "KT202",
            arg.value_range,
            f"input_reorder has {len(order)} entries but def_kernel declares {n_inputs} inputs",
            path,
        )
    elif sorted(order) != list(range(n_inputs)):
        yield finding(
            "KT203",
            arg.value_range,
            f"input_reorder {list(order)} is not a permutation of range({n_inputs}); an input "
            "would silently get no C parameter",
            path,
        )


def _undeclared_uses(
    model: TemplateModel,
    def_call: HelperCall,
    declared: set[str],
    path: str,
    instanced: bool = False,
) -> Iterator[Finding]:
    used = _buffer_uses(model, def_call)
    # A declared name no helper uses that is spelled like a used, undeclared one is a typo in
    # def_kernel's list; each instance's render reports it once, at its own token, as undefined
    # (KT102 with "did you mean"): no follow-on KT204 at every use of the right name.
    unused = sorted(declared - used)
    for call in model.calls:
        if call.owner != "kernel" or call.helper not in BUFFER_HELPERS or call is def_call:
            continue
        node = call.arg(0, "node")
        ref = node.name_ref() if node else None
        if ref is None or ref.name is None or ref.name in declared:
            continue
        if ref.name in {"kernel", "template"}:
            continue
        if instanced and did_you_mean(ref.name, unused):
            continue
        yield finding(
            "KT204",
            ref.range,
            f"buffer '{ref.name}' is not declared in def_kernel, so kernel.{call.helper} gives "
            f"{'nullptr' if call.helper == 'ptr' else 'nothing'} (Inductor does this silently)",
            path,
        )


def _buffer_uses(model: TemplateModel, def_call: HelperCall) -> set[str]:
    names: set[str] = set()
    for call in model.calls:
        if call.owner != "kernel" or call.helper not in BUFFER_HELPERS or call is def_call:
            continue
        node = call.arg(0, "node")
        ref = node.name_ref() if node else None
        if ref is not None and ref.name is not None:
            names.add(ref.name)
    return names
