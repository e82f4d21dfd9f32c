"""generate()'s arguments that are Inductor objects, declared in an instance's `vars` by what
builds them (the torch worker's side; kls.toml holds only TOML values).

- `workspace_arg = { tma_descriptors = 2 }`: the TMA-descriptor workspace Inductor gives its
  device-TMA templates (the scaled mm ones): `get_tma_workspace_arg` with that many descriptors
  a program, one program per SM of the device model. It adds the kernel's `ws_ptr` argument.
- `subgraphs = [{ inputs = ["inner_mm"], ops = ["relu"] }]`: what a template's
  `modification(subgraph_number=i, ...)` inlines (b2b gemm): subgraph i applies the aten
  pointwise ops `ops` in order to its one input (`ops = []`: the identity), lowered the way
  Inductor's b2b pass lowers its subgraph. Only aten ops tagged pointwise are accepted: no
  workspace code runs.

Every other value passes through unchanged (the config: Jinja names and constexprs).
"""

from __future__ import annotations

from typing import Any

GENERATE_OBJECTS = ("workspace_arg", "subgraphs")


class ArgumentError(ValueError):
    """A `vars` entry that does not describe the object it names; the message says the fix."""


def inductor_arguments(variables: dict[str, Any], nodes: list[Any], device: Any) -> dict[str, Any]:
    """`variables` with the entries GENERATE_OBJECTS names built as Inductor's objects, in
    place (the order of the others is kept: it is the order of the constexpr lines)."""
    out = dict(variables)
    if "workspace_arg" in out:
        out["workspace_arg"] = _workspace(out["workspace_arg"], device)
    if "subgraphs" in out:
        out["subgraphs"] = _subgraphs(out["subgraphs"], nodes, device)
    return out


def _workspace(spec: Any, device: Any) -> Any:
    from torch._inductor.utils import get_tma_workspace_arg

    count = spec.get("tma_descriptors") if isinstance(spec, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ArgumentError(
            f"vars.workspace_arg = {spec!r}: write {{ tma_descriptors = N }}, the TMA "
            "descriptors a program needs (Inductor's scaled mm TMA templates: 2)"
        )
    return get_tma_workspace_arg(num_tma_descriptors=count, device=device)


def _subgraphs(spec: Any, nodes: list[Any], device: Any) -> list[Any]:
    if not isinstance(spec, list):
        raise ArgumentError(
            f"vars.subgraphs = {spec!r}: write a list of tables, e.g. "
            '[{ inputs = ["inner_mm"], ops = ["relu"] }]'
        )
    dtype = nodes[0].get_dtype() if nodes else None
    return [_subgraph(i, entry, dtype, device) for i, entry in enumerate(spec)]


def _subgraph(i: int, entry: Any, dtype: Any, device: Any) -> Any:
    import torch
    from torch._inductor import ir
    from torch._inductor.fx_passes.b2b_gemm import build_subgraph_buffer, create_placeholder

    inputs = entry.get("inputs") if isinstance(entry, dict) else None
    ops = entry.get("ops", []) if isinstance(entry, dict) else None
    if not (isinstance(inputs, list) and len(inputs) == 1 and isinstance(inputs[0], str)):
        raise ArgumentError(
            f"vars.subgraphs[{i}] = {entry!r}: name its one input as the template's "
            'modification(...) call does, e.g. inputs = ["inner_mm"]'
        )
    if not (isinstance(ops, list) and all(isinstance(op, str) for op in ops)):
        raise ArgumentError(
            f"vars.subgraphs[{i}].ops = {ops!r}: a list of aten pointwise op names, e.g. "
            '["relu"] (empty: the identity)'
        )
    graph = torch.fx.Graph()
    value = graph.placeholder(inputs[0])
    for name in ops:
        value = graph.call_function(_pointwise(i, name), (value,))
    graph.output(value)
    subgraph = ir.Subgraph(name=f"kls_subgraph_{i}", graph_module=torch.fx.GraphModule({}, graph))
    return build_subgraph_buffer([create_placeholder(inputs[0], dtype, device)], subgraph)


def _pointwise(i: int, name: str) -> Any:
    import torch

    packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
    op = getattr(packet, "default", None)
    if op is None or torch.Tag.pointwise not in op.tags:
        raise ArgumentError(
            f"vars.subgraphs[{i}].ops: '{name}' is not an aten pointwise op of one tensor "
            "(e.g. relu, exp, sigmoid, neg)"
        )
    return op
