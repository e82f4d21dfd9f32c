"""A rendered Python kernel module on the GPU (the triton profile's instances), inside the
benchmark worker: the module is written to a file and imported with Inductor's autotuning
decorator taken off, and its @triton.jit kernel is launched on the job's tensors with the
arguments Inductor's autotuner passes (size arguments, workspace, grid). `cuda` is the
worker's driver (kls.bench.worker.Cuda).

Only the worker imports this (it needs torch and triton); the tensors are torch's, filled from
the same seeded host data as a library's, and the launch runs on the worker's stream, so the
verification and the timing are kls.bench.worker's own.
"""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kls.bench.job import BenchJob
from kls.bench.launch import Prepared, StageError
from kls.bench.reference import HostTensor

GRID_ARGS = 3  # Inductor's FixedGrid: the last three launch arguments are the grid


def module_file(plan: dict[str, Any]) -> Path:
    """Where the module is written: the plan's `file` (the sanitizer's report names it), else a
    fresh temporary folder."""
    given = plan.get("file")
    if given:
        return Path(str(given))
    folder = Path(tempfile.mkdtemp(prefix="kls-bench-"))
    return folder / f"{plan.get('kernel') or 'kernel'}.py"


def load_kernel(plan: dict[str, Any]) -> tuple[Any, Path]:
    """The module's @triton.jit kernel, imported from its file (decorator lines blanked, so
    the file's line numbers are the rendered module's)."""
    from kls.profiles.triton.worker import template_kernel, without_template_decorator

    text = str(plan["module"])
    found = template_kernel(text)
    if found is None:
        raise StageError("load", "the rendered module has no Inductor template kernel")
    path = module_file(plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(without_template_decorator(text), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"kls_bench_{found[0]}", path)
    if spec is None or spec.loader is None:
        raise StageError("load", f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise StageError("load", f"importing the rendered module raised {exc!r}") from exc
    return getattr(module, found[0]), path


def torch_dtype(torch: Any, dtype: str) -> Any:
    return getattr(torch, dtype)


def upload_torch(
    torch: Any, cuda: Any, job: BenchJob, rng: np.random.Generator
) -> tuple[dict[str, HostTensor], dict[str, int], dict[str, Any]]:
    """Each tensor's storage as a torch allocation (inputs: seeded uniform data, never
    zeros) and the strided view the kernel takes, as declared in kls.toml."""
    host: dict[str, HostTensor] = {}
    pointers: dict[str, int] = {}
    views: dict[str, Any] = {}
    for name, spec in job.tensors.items():
        if spec is None:
            continue
        host[name] = HostTensor.seeded(spec, rng)
        n = spec.storage_elements
        flat = torch.empty(max(n, 1), dtype=torch_dtype(torch, spec.dtype), device="cuda")
        if not spec.is_output and n:
            cuda.upload(flat.data_ptr(), host[name].storage)
        pointers[name] = int(flat.data_ptr())
        views[name] = torch.as_strided(flat, spec.shape, spec.stride, spec.offset)
    return host, pointers, views


def launch_arguments(plan: dict[str, Any], views: dict[str, Any], workspace: Any) -> list[Any]:
    """The kernel's arguments: the tensors in argument order, then Inductor's extra arguments
    before the grid (the workspace where its placeholder stands)."""
    extra = list(plan.get("extra_args") or [])[:-GRID_ARGS]
    missing = [n for n in plan["tensors"] if n not in views]
    if missing:
        raise StageError("setup", f"no tensor {', '.join(missing)} for the kernel's arguments")
    tail = [workspace if a == "workspace" else a for a in extra]
    return [*(views[n] for n in plan["tensors"]), *tail]


def grid_of(plan: dict[str, Any]) -> tuple[int, int, int]:
    values = list(plan.get("extra_args") or [])[-GRID_ARGS:]
    if len(values) != GRID_ARGS or not all(isinstance(v, int) for v in values):
        raise StageError("setup", f"Inductor gave no launch grid for the kernel ({values})")
    return values[0], values[1], values[2]


def prepare_module(cuda: Any, job: BenchJob, rng: np.random.Generator) -> Prepared:
    plan = job.module or {}
    try:
        import torch
        import triton
    except ImportError as exc:
        raise StageError(
            "setup", f"a Triton kernel runs where torch and triton import: {exc}"
        ) from exc
    torch.cuda.set_device(0)
    # Triton launches on torch's current stream: the worker's own, where its events and
    # flushes go.
    torch.cuda.set_stream(torch.cuda.ExternalStream(cuda.stream_handle))
    # Device-side TMA descriptors take their scratch from this allocator (Inductor sets one).
    triton.set_allocator(
        lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda")
    )
    if plan.get("problem"):
        raise StageError("setup", str(plan["problem"]))
    kernel, path = load_kernel(plan)
    host, pointers, views = upload_torch(torch, cuda, job, rng)
    expected = flex_inputs(torch, job, plan, views, host) if plan.get("flex") else None
    size = plan.get("workspace_bytes") or 0
    workspace = None
    if size:
        make = torch.zeros if plan.get("workspace_zero") else torch.empty
        workspace = make(int(size), dtype=torch.uint8, device="cuda")
    args = launch_arguments(plan, views, workspace)
    grid = grid_of(plan)
    options = {"num_warps": int(plan["num_warps"]), "num_stages": int(plan["num_stages"])}

    def launch() -> None:
        try:
            kernel[grid](*args, **options)
        except Exception as exc:  # Triton's compile or launch, before anything ran
            raise StageError("compile", f"Triton could not launch the kernel: {exc}") from exc

    details = {
        "workspace_bytes": int(size),
        "launch": {"kernel": plan.get("kernel"), "grid": list(grid), "module_file": str(path)},
    }
    return Prepared(host, pointers, launch, details, expected)


def flex_inputs(
    torch: Any,
    job: BenchJob,
    plan: dict[str, Any],
    views: dict[str, Any],
    host: dict[str, HostTensor],
) -> Callable[[], np.ndarray] | None:
    """A flex kernel's block-mask arguments filled from its mask on the GPU (their host copies
    too: a user's reference reads what the kernel read), and the reference where the job
    verifies against flex's own (kls.bench.flex)."""
    from kls.bench.flex import block_filled, block_mask, expected_output, fill_blocks

    flex = plan["flex"]
    mask = block_mask(torch, flex, views)
    made = plan.get("made", {})
    fill_blocks(mask, made, views)
    torch.cuda.synchronize()
    for name in block_filled(made):
        if name in host and views[name].numel():
            filled = views[name].detach().contiguous().view(-1).cpu().numpy()
            host[name].storage[: filled.size] = filled
    if job.reference != "flex":
        return None
    return lambda: expected_output(torch, flex, views, mask)
