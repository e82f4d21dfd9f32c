"""Flex attention through Inductor's own lowering, in the torch worker (no GPU).

Inductor renders the flex templates only from its lowering of the `flex_attention` (or
`flex_attention_backward`) higher-order op: the lowering turns the instance's score_mod and
mask_mod into subgraphs (the `modification` expansions), sizes the block mask, and derives
most kernel options (IS_DIVISIBLE, SM_SCALE, head dims, ...). kls runs exactly that path:
1. the op is traced to an FX graph by make_fx over fake CUDA tensors (q, k, v of the instance;
   the block mask from the instance's mask_mod, or flex's own full mask for none);
2. Inductor's GraphLowering lowers the graph under the worker's device model;
3. the first `generate` of the wanted template (the editor's text in place of Inductor's) is
   captured and the lowering stopped there, before any autotuning: the module text is
   `choice.bmreq.module_path`, every placeholder finished, nothing fused.

The instance's vars, num_warps and num_stages are passed as flex's `kernel_options`, so they
pin the config the lowering would otherwise take from its heuristics.

Mods are the workspace's Python, imported here: the worker runs only where the workspace is
trusted (kls.profiles.triton.client.allow_torch).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

from kls.profiles.triton.flex_promises import (
    Undecided,
    mask_reads_batch_or_head,
    promise_breaks,
    promises_of,
)
from kls.profiles.triton.generate_hook import answering
from kls.profiles.triton.launch import flex_launch
from kls.profiles.triton.overridden import constexprs
from kls.profiles.triton.template_time import TimedTemplate

# The flex templates by Inductor's registered name, and the op's kernel_options BACKEND that
# makes the lowering reach it.
BACKENDS = {
    "flex_attention": "TRITON",
    "flex_decoding": "TRITON_DECODE",
    "flex_attention_backward": "TRITON",
}
SPARSE_BLOCK = 128  # flex's default block mask block size (both sides)


class ModError(Exception):
    """A score_mod/mask_mod that cannot be loaded; the message says what to do."""


class _Captured(Exception):
    """Raised from generate once the wanted choice exists: the lowering stops there."""

    def __init__(self, choice: Any) -> None:
        super().__init__("captured")
        self.choice = choice


def load_mod(ref: str | None) -> Callable[..., Any] | None:
    """The function a `/abs/file.py:name` reference names (imported afresh each time, so an
    edit to the file is seen), or None for no reference."""
    if not ref:
        return None
    path, _, name = ref.rpartition(":")
    digest = hashlib.sha256(ref.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(f"kls_flex_mods_{digest}", path)
    if spec is None or spec.loader is None:
        raise ModError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ModError(f"importing {path} raised {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ModError(f"{path} defines no function '{name}'")
    return fn  # type: ignore[no-any-return]


@contextlib.contextmanager
def fake_cuda(torch: Any) -> Iterator[Any]:
    """A FakeTensorMode in which 'cuda' tensors need no driver: fake tensors' one real CUDA
    call (a context made on first use) is answered beforehand, and Tensor.copy_ goes to the
    aten op (its Python binding enters a real CUDA device guard). Flex's own eager path
    (torch.compile of the op) is bypassed: the op is called directly, as under Dynamo."""
    from torch._subclasses import fake_tensor
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.attention import flex_attention as flex_api

    available = torch.cuda.is_available
    torch.cuda.is_available = lambda: False
    try:
        fake_tensor.init_gpu_context(torch.device("cuda"))
        fake_tensor.init_gpu_context(torch.device("cuda", 0))
    finally:
        torch.cuda.is_available = available
    copy = torch.Tensor.copy_
    debug = flex_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    torch.Tensor.copy_ = lambda self, src, non_blocking=False: torch.ops.aten.copy_.default(
        self, src, non_blocking
    )
    flex_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    try:
        yield FakeTensorMode(allow_non_fake_inputs=True)
    finally:
        torch.Tensor.copy_ = copy
        flex_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = debug


def _tensor(torch: Any, spec: dict[str, Any]) -> Any:
    dtype = getattr(torch, spec["dtype"])
    return torch.empty_strided(spec["shape"], spec["stride"], dtype=dtype, device="cuda")


def _mask_parts(torch: Any, mask_mod: Any, sq: int, skv: int) -> list[Any]:
    """The block mask's tensors, by their shapes (the render reads shapes, never values): for
    a mask_mod, the eight of a mask over [1, 1, Sq, Skv] (broadcast over batch and heads, as
    create_block_mask(mod, None, None, ...) makes it); for none, the four of flex's own
    one-block mask."""
    if mask_mod is None:
        shapes = [(1, 1, 1), (1, 1, 1, 1)] * 2
    else:
        nq, nkv = math.ceil(sq / SPARSE_BLOCK), math.ceil(skv / SPARSE_BLOCK)
        shapes = [(1, 1, nq), (1, 1, nq, nkv)] * 2 + [(1, 1, nkv), (1, 1, nkv, nq)] * 2
    return [torch.zeros(s, dtype=torch.int32, device="cuda") for s in shapes]


def _block_mask(mask_mod: Any, sq: int, skv: int, parts: tuple[Any, ...]) -> Any:
    """The BlockMask flex_attention receives: the instance's mask over its parts, or the
    one-block mask flex makes when it is given none."""
    from torch.nn.attention import flex_attention as flex_api

    if mask_mod is None:
        large = flex_api._LARGE_SPARSE_BLOCK_SIZE
        kv_num, kv_idx, q_num, q_idx = parts
        return flex_api.BlockMask(
            (1, 1), kv_num, kv_idx, None, None, q_num, q_idx, None, None,
            BLOCK_SIZE=(large, large), mask_mod=flex_api.noop_mask,
        )  # fmt: skip
    block = (SPARSE_BLOCK, SPARSE_BLOCK)
    return flex_api.BlockMask((sq, skv), *parts, BLOCK_SIZE=block, mask_mod=mask_mod)


def _decompositions() -> Any:
    """Inductor's decompositions, as AOT autograd applies them before Inductor lowers (flex's
    own noop_mask is `new_ones`, which the mod lowering knows only as `full`)."""
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def traced(torch: Any, req: dict[str, Any], mode: Any) -> tuple[Any, list[Any]]:
    """The op as an FX graph, and its example inputs (fake CUDA tensors)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention.flex_attention import flex_attention

    score_mod = load_mod(req.get("score_mod"))
    mask_mod = load_mod(req.get("mask_mod"))
    options = kernel_options(req)
    with mode:
        q, k, v = (_tensor(torch, req["tensors"][n]) for n in ("q", "k", "v"))
        sq, skv = q.shape[-2], k.shape[-2]
        parts = _mask_parts(torch, mask_mod, sq, skv)
    if req["op"] == "flex_attention_backward":
        return _traced_backward(torch, mode, (q, k, v), score_mod, mask_mod, parts, options)

    def attend(q: Any, k: Any, v: Any, *parts: Any) -> Any:
        block_mask = _block_mask(mask_mod, sq, skv, parts)
        gqa = q.shape[1] != k.shape[1]  # fewer key/value heads: grouped-query attention
        return flex_attention(
            q, k, v, score_mod, block_mask, kernel_options=options, enable_gqa=gqa
        )

    inputs = [q, k, v, *parts]
    with mode:
        return make_fx(attend, _decompositions())(*inputs), inputs


def _traced_backward(
    torch: Any,
    mode: Any,
    qkv: tuple[Any, Any, Any],
    score_mod: Any,
    mask_mod: Any,
    parts: list[Any],
    options: dict[str, Any],
) -> tuple[Any, list[Any]]:
    """The backward op alone, as AOT autograd hands it to Inductor: q, k, v, the forward's
    out and logsumexp, the output's gradient and the block mask are the graph's inputs; the
    score_mod's forward and joint graphs are made as flex's autograd makes them. (The
    autograd engine is not run: over fake CUDA tensors it would ask the driver for streams.)"""
    from torch._higher_order_ops.flex_attention import create_fw_bw_graph
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention import flex_attention as flex_api

    q, k, v = qkv
    sq, skv = q.shape[-2], k.shape[-2]
    with mode:
        grads = [t.detach().requires_grad_(True) for t in qkv]
        options = flex_api._apply_kernel_options(*grads, False, options)
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device="cuda")
        grad_out = torch.empty_like(out)
    index = (torch.zeros((), requires_grad=True),) + tuple(
        torch.zeros((), dtype=torch.int) for _ in range(4)
    )
    fw_graph, joint_graph = create_fw_bw_graph(score_mod or flex_api._identity, index, ())
    scale = 1.0 / math.sqrt(q.shape[-1])

    def backward(q: Any, k: Any, v: Any, out: Any, lse: Any, grad: Any, *parts: Any) -> Any:
        block_mask = _block_mask(mask_mod, sq, skv, parts).as_tuple()
        return torch.ops.higher_order.flex_attention_backward(
            q, k, v, out, lse, grad, None, fw_graph, joint_graph, block_mask, scale, options,
            (), (),
        )  # fmt: skip

    inputs = [q, k, v, out, lse, grad_out, *parts]
    with mode:
        return make_fx(backward, _decompositions())(*inputs), inputs


def kernel_options(req: dict[str, Any]) -> dict[str, Any]:
    """flex's kernel_options for the instance: its vars, the launch, the op's backend."""
    options = dict(req.get("vars", {}))
    options.setdefault("num_warps", int(req["num_warps"]))
    options.setdefault("num_stages", int(req["num_stages"]))
    options.setdefault("BACKEND", BACKENDS[req["op"]])
    return options


@contextlib.contextmanager
def editor_text(template: Any, text: str, env: Any) -> Iterator[None]:
    """Inductor's template object renders `text` in kls's sandbox `env` while active (the
    lowering holds the object itself, so it is changed in place and restored)."""
    from torch._inductor.select_algorithm import GeneratedCodeCache

    saved = (template.template, template._hash, template._generated_code_cache)
    template.template = TimedTemplate(env.from_string(text))
    template._hash = hashlib.sha256(text.encode()).hexdigest()
    template._generated_code_cache = GeneratedCodeCache()
    try:
        yield
    finally:
        template.template, template._hash, template._generated_code_cache = saved


def _inductors_own() -> contextlib.AbstractContextManager[None]:
    """No change: the template renders its own text in Inductor's own Jinja environment."""
    return contextlib.nullcontext()


def capture(name: str) -> contextlib.AbstractContextManager[None]:
    """TritonTemplate.generate of the template `name` raises _Captured with its choice."""

    def answer(original: Callable[..., Any], template: Any, *args: Any, **kwargs: Any) -> Any:
        choice = original(template, *args, **kwargs)
        if template.name == name and hasattr(choice, "bmreq"):
            raise _Captured(choice)
        return choice

    return answering(answer)


def _captured(exc: BaseException) -> _Captured | None:
    """The _Captured signal under the exceptions Inductor wrapped it in, if any."""
    chain: BaseException | None = exc
    for _ in range(16):
        if chain is None or isinstance(chain, _Captured):
            return chain
        chain = chain.__cause__ or chain.__context__
    return None


def _unimportable_module(exc: BaseException) -> str | None:
    """The module Inductor rendered but could not import (a Python error in the template's
    text): its text, so that the parse check (KT851) places the error on its template line."""
    chain: BaseException | None = exc
    for _ in range(16):
        if chain is None:
            return None
        if isinstance(chain, SyntaxError) and chain.filename and os.path.isfile(chain.filename):
            with open(chain.filename, encoding="utf-8") as f:
                return f.read()
        chain = chain.__cause__ or chain.__context__
    return None


def _innermost(exc: BaseException) -> BaseException:
    """The exception Inductor's LoweringException wraps (it raises the wrapper `from None`
    while handling the original, which stays its __context__)."""
    for _ in range(16):
        inner = exc.__cause__ or exc.__context__
        if type(exc).__name__ != "LoweringException" or inner is None:
            return exc
        exc = inner
    return exc


def render_flex(torch: Any, env: Any, req: dict[str, Any]) -> dict[str, Any]:
    """The module Inductor generates for a flex instance, from the editor's text in kls's
    sandbox `env` (None: Inductor's own text and Jinja environment, for the conformance
    check in benchmarks/triton_flex_gpu.py)."""
    importlib.import_module("torch._inductor.kernel.flex.flex_attention")  # its templates
    from torch._inductor.graph import GraphLowering
    from torch._inductor.select_algorithm import TritonTemplate
    from torch._inductor.virtualized import V

    op = req.get("op")
    if op not in BACKENDS:
        raise LookupError(f"no flex template '{op}' (one of: {', '.join(BACKENDS)})")
    template = TritonTemplate.all_templates[op]
    with fake_cuda(torch) as mode:
        gm, inputs = traced(torch, req, mode)
        graph = GraphLowering(gm)
        text = editor_text(template, req["text"], env) if env is not None else _inductors_own()
        with text, capture(op):
            try:
                with V.set_graph_handler(graph), mode:
                    graph.run(*inputs)
            except Exception as exc:
                captured = _captured(exc)
                if captured is None:
                    unimportable = _unimportable_module(exc)
                    if unimportable is not None:
                        return {"module": unimportable, "kernel_name": "", "op": op}
                    raise _innermost(exc) from None
                choice = captured.choice
            else:
                raise RuntimeError(f"Inductor's lowering did not reach the {op} template")
    with open(choice.bmreq.module_path, encoding="utf-8") as f:
        found = {"module": f.read(), "kernel_name": str(choice.bmreq.kernel_name), "op": op}
    launch = flex_launch(op, choice.bmreq)
    ref = req.get("mask_mod")
    mask_mod = load_mod(ref)  # the user's file, run once for both questions
    launch["mask_reads_batch_or_head"] = mask_reads_batch_or_head(torch, mask_mod, ref)
    report = promise_report(torch, req, found["module"], mask_mod)
    return {**found, "launch": launch, "promises": report}


def promise_report(
    torch: Any, req: dict[str, Any], module: str, mask_mod: Callable[..., Any] | None
) -> dict[str, dict[str, str]]:
    """The promises the instance's options make (ROWS_GUARANTEED_SAFE = true, ...) that its
    kernel reads: those its mask breaks at the module's BLOCK_N ("broken"), and those kls
    cannot decide ("undecided"), each with why. The mask is looked at only when one is made."""
    made = [p for p in promises_of(req["op"]) if req.get("vars", {}).get(p)]
    if not made:
        return {}
    printed = constexprs(module)
    block_n = printed_int(printed, "BLOCK_N") or int(req["vars"].get("BLOCK_N", 16))
    try:
        split_kv = printed_int(printed, "SPLIT_KV")
        breaks = decide_promises(torch, req, block_n, split_kv, mask_mod)
    except Undecided as exc:
        return {"undecided": dict.fromkeys(made, str(exc))}
    return {"broken": {p: why for p in made if (why := breaks.get(p))}}


def decide_promises(
    torch: Any,
    req: dict[str, Any],
    block_n: int,
    split_kv: int | None = None,
    mask_mod: Callable[..., Any] | None = None,
) -> dict[str, str | None]:
    """flex_promises.promise_breaks for the request's mask (`mask_mod` when already loaded)
    and lengths; Undecided also where evaluating the mask fails (its memory, a mod that
    raises)."""
    q, k = req["tensors"]["q"], req["tensors"]["k"]
    sizes = (int(q["shape"][-2]), int(k["shape"][-2]))
    ref = req.get("mask_mod")
    try:
        fn = mask_mod if mask_mod is not None else load_mod(ref)
        return promise_breaks(torch, fn, *sizes, req["op"], block_n, ref, split_kv)
    except Undecided:
        raise
    except Exception as exc:
        raise Undecided(f"evaluating the mask raised {type(exc).__name__}: {exc}") from exc


def printed_int(printed: dict[str, str], name: str) -> int | None:
    """An integer the rendered kernel prints as `NAME : tl.constexpr = N` (`printed`: its
    constexprs; None: none)."""
    text = printed.get(name, "")
    return int(text) if text.isdigit() else None
