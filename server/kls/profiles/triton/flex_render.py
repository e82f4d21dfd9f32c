"""A flex attention instance: its request to the torch worker, its render mapped back to the
three files of its template, and the buffers its template sees (for the static checks).

A flex instance declares q, k and v ([B, H, S, D]); Inductor's lowering makes every other
buffer the kernel takes (logsumexp, the block mask, the output; for the backward the
gradients), its mods' subgraphs and most kernel options. `vars`, `num_warps` and `num_stages`
are flex's kernel_options (BLOCK_M, BLOCK_N, ...; backward: BLOCK_M1, BLOCK_N1, BLOCK_M2,
BLOCK_N2). `score_mod`/`mask_mod` name Python functions in the project; they are imported only
by the torch worker, which runs only where the workspace is trusted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path
from typing import Any

from kls.dtypes import lookup_dtype
from kls.findings import Severity
from kls.instances.schema import InstanceSpec, TensorSpec, contiguous_strides
from kls.profiles.triton.align import align
from kls.profiles.triton.client import WorkerUnavailable, shared_worker
from kls.profiles.triton.errors import finding_for
from kls.profiles.triton.flex_parts import Concatenation, concatenation, flex_op
from kls.profiles.triton.overridden import overridden_findings, var_site
from kls.runtime.record import RuntimeFinding, Site
from kls.runtime.result import RenderResult
from kls.sourcemap import Origin, SourceMap

QKV = ("q", "k", "v")
QKV_ARGS = ("Q", "K", "V")  # their names in the kernel's arguments
SPARSE_BLOCK = 128  # the block mask's block size (flex's default)


def _tensor(spec: TensorSpec) -> dict[str, Any]:
    return {"shape": list(spec.shape), "stride": list(spec.stride), "dtype": spec.dtype.name}


def qkv_of(instance: InstanceSpec) -> dict[str, TensorSpec] | None:
    """q, k and v (any case), each of rank 4; None when one is missing or of another rank."""
    found = {n.lower(): s for n, s in instance.tensors.items() if s is not None}
    specs = {n: found.get(n) for n in QKV}
    if any(s is None or s.rank != 4 for s in specs.values()):
        return None
    return {n: s for n, s in specs.items() if s is not None}


def _mod_digest(ref: str | None) -> str | None:
    """The mods file's content hash: an edited file is a new request (never cached stale)."""
    if not ref:
        return None
    try:
        return hashlib.sha256(Path(ref.rpartition(":")[0]).read_bytes()).hexdigest()
    except OSError:
        return None


def missing_qkv(op: str) -> str:
    return (
        f"a {op} instance declares q, k and v, each [B, H, S, D] (e.g. tensors.q = "
        '{ shape = [4, 16, 4096, 128], dtype = "bf16" }); Inductor makes the other buffers'
    )


def flex_request(instance: InstanceSpec, op: str, text: str) -> dict[str, Any]:
    qkv = qkv_of(instance) or {}
    return {
        "kind": "flex",
        "op": op,
        "text": text,
        "tensors": {n: _tensor(s) for n, s in qkv.items()},
        "score_mod": instance.score_mod,
        "mask_mod": instance.mask_mod,
        "mods_sha256": [_mod_digest(instance.score_mod), _mod_digest(instance.mask_mod)],
        "vars": instance.variables,
        "num_warps": instance.num_warps,
        "num_stages": instance.num_stages,
        "device": instance.device,
    }


def _config_site(instance: InstanceSpec) -> Site:
    return Site(str(instance.config_path), instance.line)


def _mapped(finding: RuntimeFinding, instance: InstanceSpec, joined: Concatenation) -> Any:
    """The finding with a site in the concatenation moved to the part's file and line."""
    site = finding.site
    if site is None or site.path != str(instance.template):
        return finding
    return dataclasses.replace(finding, site=Site(*joined.origin(site.line)))


def _error_finding(error: dict[str, Any], instance: InstanceSpec, joined: Concatenation) -> Any:
    if error.get("kind") == "ModError":
        return RuntimeFinding(
            "KT812",
            Severity.ERROR,
            f"{error.get('message', '')}: score_mod/mask_mod name a function as "
            '"file.py:function" in the project (e.g. mask_mod = "mods.py:causal")',
            _config_site(instance),
        )
    return _mapped(finding_for(error, instance, joined.text), instance, joined)


def render_flex(
    instance: InstanceSpec, overrides: dict[Path, str], seconds: float | None = None
) -> RenderResult:
    """Inductor's module for a flex instance, every line mapped to its part's file and line
    (`seconds`: the render limit for the templates' own code)."""
    op = flex_op(instance)
    assert op is not None
    result = RenderResult(instance, None, None, [], [])
    result.files = [str(instance.template)]
    try:
        joined = concatenation(instance, op, overrides)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        message = f"cannot read the {op} template's parts: {exc}"
        result.findings.append(RuntimeFinding("KT105", Severity.ERROR, message, None))
        return result
    result.files = list(joined.paths)
    if qkv_of(instance) is None:
        result.findings.append(
            RuntimeFinding("KT801", Severity.ERROR, missing_qkv(op), _config_site(instance))
        )
        return result
    try:
        request = flex_request(instance, op, joined.text)
        answer = shared_worker().render({**request, "template_seconds": seconds})
    except WorkerUnavailable as exc:
        site = Site(joined.paths[0], 0)
        result.findings.append(RuntimeFinding("KT800", Severity.INFO, str(exc), site))
        return result
    error = answer.get("error")
    if error:
        result.findings.append(_error_finding(error, instance, joined))
        return result
    module = str(answer.get("module", ""))
    result.text = module
    result.findings.extend(promise_findings(instance, answer.get("promises") or {}))
    result.findings.extend(overridden_findings(instance, module))
    result.launch = bench_launch(instance, op, answer)
    origins = [
        Origin(*joined.origin(line)) if line is not None else None
        for line in align(joined.text, module)
    ]
    result.source_map = SourceMap(origins)
    return result


def bench_launch(instance: InstanceSpec, op: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The worker's launch with the instance's own names for q, k and v (kls.toml's, in
    whatever case), and what the benchmark needs to fill the mask and verify the output."""
    launch = dict(answer.get("launch") or {})
    own = {n.lower(): n for n, s in instance.tensors.items() if s is not None}
    launch["tensors"] = [
        own.get(n.lower(), n) if n in QKV_ARGS else n for n in launch.get("tensors", [])
    ]
    launch["template"] = op
    launch["kernel"] = str(answer.get("kernel_name", ""))
    launch["flex"] = {
        "op": op,
        "q": own.get("q"),
        "k": own.get("k"),
        "v": own.get("v"),
        "mask_mod": instance.mask_mod,
        "score_mod": instance.score_mod,
        "block": SPARSE_BLOCK,
    }
    return launch


# What each promise lets the kernel skip, and what a broken one then does.
PROMISED = {
    "ROWS_GUARANTEED_SAFE": (
        "every row's running maximum is finite after its first tile of keys",
        "the row comes out NaN",
    ),
    "BLOCKS_ARE_CONTIGUOUS": (
        "the blocks each block visits are consecutive",
        "it reads the wrong keys past a gap",
    ),
}


def promise_findings(
    instance: InstanceSpec, report: dict[str, dict[str, str]]
) -> list[RuntimeFinding]:
    """At the kls.toml line of each promise the instance makes: KT814 where its mask breaks
    it, KT815 where kls cannot decide it."""
    broken, undecided = report.get("broken") or {}, report.get("undecided") or {}
    found = []
    for name, why in broken.items():
        promise, effect = PROMISED.get(name, ("what it says", "it computes a wrong result"))
        message = (
            f"{name} = true promises that {promise}, and this instance's mask breaks it: "
            f"{why}. The kernel trusts the promise ({effect}): remove {name} (kls tune "
            "offers it only where the mask keeps it)"
        )
        found.append(RuntimeFinding("KT814", Severity.ERROR, message, var_site(instance, name)))
    for name, why in undecided.items():
        message = (
            f"kls cannot check {name} = true for this mask ({why}); the kernel trusts it: "
            "verify the output (kls bench) before relying on it"
        )
        found.append(RuntimeFinding("KT815", Severity.WARNING, message, var_site(instance, name)))
    return found


# -- the buffers the template sees, for the static checks ------------------------------------


def _spec(name: str, shape: tuple[int, ...], dtype: str) -> TensorSpec:
    found = lookup_dtype(dtype)
    assert found is not None
    return TensorSpec(name, shape, found, contiguous_strides(shape))


def _blocks(prefix: str, rows: int, cols: int, masked: bool) -> dict[str, TensorSpec]:
    """A block list's two tensors (`rows` blocks, each listing up to `cols`): with a
    mask_mod, the block mask's; without, flex's one-block mask (FULL_ lists empty)."""
    count: tuple[int, ...] = (1, 1, rows)
    index: tuple[int, ...] = (1, 1, rows, cols)
    dtype = "int32"
    if not masked and prefix.startswith("FULL_"):  # Inductor's placeholder: empty(0)
        count, index, dtype = (0,), (0,), "float32"
    elif not masked:
        count, index = (1, 1, 1), (1, 1, 1, 1)
    return {
        f"{prefix}NUM_BLKS": _spec(f"{prefix}NUM_BLKS", count, dtype),
        f"{prefix}IDX": _spec(f"{prefix}IDX", index, dtype),
    }


def static_view(instance: InstanceSpec) -> InstanceSpec:
    """For a flex instance, the instance as its template's def_kernel sees it: every buffer
    Inductor passes, in def_kernel's order, then the output, and USE_TMA (off unless given);
    any other instance as it is."""
    op = flex_op(instance)
    qkv = qkv_of(instance) if op is not None else None
    if op is None or qkv is None:
        return instance
    q, k, v = qkv["q"], qkv["k"], qkv["v"]
    b, h, sq, d = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    nq, nkv = math.ceil(sq / SPARSE_BLOCK), math.ceil(skv / SPARSE_BLOCK)
    masked = instance.mask_mod is not None

    def blocks(*lists: tuple[str, int, int]) -> dict[str, TensorSpec]:
        return {k: t for args in lists for k, t in _blocks(*args, masked).items()}

    kv_blocks = blocks(("KV_", nq, nkv), ("FULL_KV_", nq, nkv))
    stats = "float32"  # logsumexp, max and the decode partials are fp32
    tensors: dict[str, TensorSpec | None] = {"Q": q, "K": k, "V": v}
    if op == "flex_attention":
        row = (b, h, sq)
        tensors |= {"LSE": _spec("LSE", row, stats), "MAX": _spec("MAX", row, stats)}
        tensors |= kv_blocks
        tensors["out"] = _spec("out", (b, h, sq, dv), q.dtype.name)
    elif op == "flex_decoding":
        # Inductor's split-KV partials: [B, SPLIT_KV, Hq, Sq(, Dv)], SPLIT_KV from the SMs.
        g = max(h // max(hkv, 1), 1)
        split = max(int(instance.device.get("sm_count", 132)) // max(b * hkv, 1) * 2, 1)
        tensors["Q"] = _spec("Q", (b, hkv, g, sq, d), q.dtype.name)
        partial = (b, split, h, sq)
        tensors |= {"M": _spec("M", partial, stats), "L": _spec("L", partial, stats)}
        tensors |= kv_blocks
        tensors["out"] = _spec("out", (*partial, dv), stats)
    else:
        row = (b, h, sq)
        tensors |= {"LSE": _spec("LSE", row, stats), "DELTA": _spec("DELTA", row, stats)}
        tensors |= {"DO": _spec("DO", (b, h, sq, dv), q.dtype.name)}
        tensors |= {"DQ": _spec("DQ", q.shape, q.dtype.name)}
        tensors |= {"DV": _spec("DV", (b, hkv, skv, dv), q.dtype.name)}
        tensors |= blocks(("KV_", nq, nkv), ("Q_", nkv, nq))
        tensors |= blocks(("FULL_KV_", nq, nkv), ("FULL_Q_", nkv, nq))
        tensors["out"] = _spec("out", (b, hkv, skv, d), q.dtype.name)
    variables = {"USE_TMA": False, **instance.variables}
    return dataclasses.replace(instance, tensors=tensors, variables=variables)
