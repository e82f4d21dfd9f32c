"""`kls bench --sanitize`: the instance's kernel run once under compute-sanitizer's memcheck
and once under its racecheck (each a child process with a deadline), every access the reports
name made a finding at the template line that produced the load or store.

First, once a process, kls checks that compute-sanitizer works on this machine's GPU (on some
hosts it refuses the device): where it does not, the result is one "sanitizer unavailable"
finding. Locations: a Triton kernel's line info names the rendered module's file and line
(Triton emits `.loc` for the module the worker imported); the render's source map takes that
line to the template. A report line in a file the instance reads (a template with `#line`
directives) stands as it is; one without line info goes to the kernel's declaration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kls.bench.run import BenchOptions, prepare_job, worker_command
from kls.bench.runner import run_worker
from kls.bench.sanitizer_report import Access, Location, merged, parse_report, summary
from kls.checks.rendered import line_range
from kls.checks.run import ModelCache
from kls.findings import Finding, Severity
from kls.instances import InstanceSpec
from kls.positions import Range
from kls.render import RenderResult

TOOLS = ("memcheck", "racecheck")
DEFAULT_SANITIZER = "/usr/local/cuda/bin/compute-sanitizer"
PROBE_SECONDS = 120.0
UNAVAILABLE = "sanitizer unavailable"
CODES = {"memcheck": "KT720", "racecheck": "KT721"}
# A probe of the sanitizer on the device: a context, an allocation and a memset, through the
# driver the benchmark worker uses.
PROBE = (
    "from cuda.bindings import driver as d\n"
    "d.cuInit(0)\n"
    "err, dev = d.cuDeviceGet(0)\n"
    "err, ctx = d.cuDevicePrimaryCtxRetain(dev)\n"
    "d.cuCtxSetCurrent(ctx)\n"
    "err, ptr = d.cuMemAlloc(1 << 20)\n"
    "d.cuMemsetD8(ptr, 1, 1 << 20)\n"
    "d.cuCtxSynchronize()\n"
    "print('probe', err)\n"
)


@dataclass
class SanitizeReport:
    instance: str
    ok: bool  # the tools ran and reported nothing
    findings: list[Finding] = field(default_factory=list)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # summary, seconds, errors
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [f.to_json() for f in self.findings]
        return data

    def headline(self) -> str:
        if self.message:
            return f"✗ {self.message}"
        if self.ok:
            return "✓ memcheck and racecheck: no errors"
        counts = ", ".join(f"{t}: {v.get('errors', 0)} error(s)" for t, v in self.tools.items())
        return f"✗ sanitizer findings ({counts})"


def sanitizer_path() -> str:
    """`KLS_COMPUTE_SANITIZER`, else CUDA's default place, else PATH's."""
    given = os.environ.get("KLS_COMPUTE_SANITIZER")
    if given:
        return given
    if Path(DEFAULT_SANITIZER).is_file():
        return DEFAULT_SANITIZER
    return shutil.which("compute-sanitizer") or DEFAULT_SANITIZER


_PROBED: dict[tuple[str, str], str | None] = {}


def sanitizer_problem(sanitizer: str, python: str) -> str | None:
    """None when compute-sanitizer runs a small CUDA program on the device without error,
    else why not, in words (remembered for the process)."""
    key = (sanitizer, python)
    if key not in _PROBED:
        _PROBED[key] = _probe(sanitizer, python)
    return _PROBED[key]


def _probe(sanitizer: str, python: str) -> str | None:
    if not Path(sanitizer).is_file() and shutil.which(sanitizer) is None:
        return (
            f"{UNAVAILABLE}: no compute-sanitizer at {sanitizer} (install the CUDA toolkit's, or "
            "set KLS_COMPUTE_SANITIZER to its path)"
        )
    try:
        done = subprocess.run(
            [sanitizer, "--tool", "memcheck", "--error-exitcode", "86", python, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return f"{UNAVAILABLE}: its probe ran past {PROBE_SECONDS:g} s"
    except OSError as exc:
        return f"{UNAVAILABLE}: {exc}"
    output = done.stdout + done.stderr
    if done.returncode == 0 and "ERROR SUMMARY: 0 errors" in output:
        return None
    return f"{UNAVAILABLE}: {probe_failure(output, done.returncode)}"


def probe_failure(output: str, returncode: int) -> str:
    """The line of the probe's output that says why (the first error the tool printed)."""
    lines = [ln.strip(" =") for ln in output.splitlines() if ln.strip(" =")]
    for line in lines:
        lowered = line.lower()
        if ("error" in lowered and "error summary: 0" not in lowered) or "not supported" in lowered:
            return line[:300]
    return f"the probe exited with status {returncode}" + (f": {lines[-1][:300]}" if lines else "")


# -- where a reported access is in the template ----------------------------------------------


@dataclass(frozen=True)
class Place:
    path: str
    line: int  # 0-based


def place_of(
    where: Location | None,
    module_file: Path | None,
    rendered: RenderResult,
    instance: InstanceSpec,
    models: ModelCache | None = None,
) -> tuple[Place, bool]:
    """The template line of a reported location, and whether it is that exact line (False: the
    kernel's declaration stands in, for a location without line info or in another file)."""
    if where is not None and where.file is not None and where.line is not None:
        if module_file is not None and _same_file(where.file, module_file):
            origin = rendered.source_map.origin(where.line - 1) if rendered.source_map else None
            if origin is not None:
                return Place(origin.path, origin.line), True
        elif any(_same_file(where.file, Path(str(f))) for f in _sources(rendered, instance)):
            return Place(str(Path(where.file)), where.line - 1), True
    return Place(str(instance.template), _declaration_line(instance, models or ModelCache())), False


def _sources(rendered: RenderResult, instance: InstanceSpec) -> list[object]:
    """The files the render read: a report line in one of them is a template line already."""
    return [*rendered.files, instance.template]


def _same_file(reported: str, path: Path) -> bool:
    try:
        return Path(reported).resolve() == path.resolve()
    except OSError:
        return Path(reported).name == path.name


def _declaration_line(instance: InstanceSpec, models: ModelCache) -> int:
    """The template's def_kernel line (0 where it has none)."""
    model = models.model(str(instance.template))
    if model is None:
        return 0
    declared = model.kernel_declarations()
    return declared[0].start.line if declared else 0


def access_finding(
    access: Access,
    module_file: Path | None,
    rendered: RenderResult,
    instance: InstanceSpec,
    models: ModelCache | None = None,
) -> Finding:
    """The finding for one reported access, at the template line that made it; `models`
    parses each template once a run (the editor's text where it has one)."""
    models = models or ModelCache()
    place, exact = place_of(access.location, module_file, rendered, instance, models)
    for frame in access.frames if not exact else ():  # the kernel's own line, inlined into
        found, on_line = place_of(frame, module_file, rendered, instance, models)
        if on_line:
            kernel, pc = (
                (access.location.kernel, access.location.pc) if access.location else ("", "")
            )
            access = replace(access, location=Location(kernel, pc, frame.file, frame.line))
            place, exact = found, True
            break
    rng = line_range(models.model(place.path), place.line) if place.line >= 0 else Range.of_line(0)
    return Finding(
        CODES.get(access.tool, "KT720"),
        Severity.ERROR,
        rng,
        describe(access, module_file, rendered, instance, exact),
        place.path,
        instance.name,
        source="kls-sanitize",
    )


def describe(
    access: Access,
    module_file: Path | None,
    rendered: RenderResult,
    instance: InstanceSpec,
    exact: bool,
) -> str:
    """`memcheck: Invalid __global__ read of size 2 bytes in triton_mm (module line 62), thread
    (32,0,0) in block (3,0,0): Address 0x... is out of bounds (x128 threads)`."""
    where = access.location
    text = f"{access.tool}: {access.what}"
    if where is not None:
        text += f" in {where.kernel or 'the kernel'}"
        if where.line is not None:
            text += f" ({Path(where.file or '').name or 'module'} line {where.line})"
        elif not exact:
            text += " (no line info in the report)"
    if access.other is not None:
        other, _ = place_of(access.other, module_file, rendered, instance)
        text += f", against the access at {Path(other.path).name}:{other.line + 1}"
    if access.thread:
        text += f", thread {access.thread}"
    if access.detail:
        text += f": {access.detail}"
    if access.count > 1:
        text += f" (reported {access.count} times)"
    return text


# -- the run ------------------------------------------------------------------------------------


def sanitize_instance(
    instance: InstanceSpec,
    options: BenchOptions | None = None,
    overrides: dict[Path, str] | None = None,
    cancel: threading.Event | None = None,
) -> SanitizeReport:
    options = options or BenchOptions()
    models = ModelCache(overrides)
    command, env = worker_command(instance)
    report = SanitizeReport(instance.name, ok=False)
    sanitizer = sanitizer_path()
    problem = sanitizer_problem(sanitizer, command[0])
    if problem is not None:
        report.findings.append(
            _instance_finding(instance, "KT722", Severity.WARNING, problem, models)
        )
        report.message = problem
        return report
    job, rendered, why = prepare_job(instance, options, overrides, cancel, verify=False)
    if job is None or rendered is None:
        report.message = why
        return report
    job.measure, job.baseline = False, False
    folder = Path(tempfile.mkdtemp(prefix="kls-sanitize-"))
    module_file = None
    if job.module is not None:
        module_file = folder / f"{job.module.get('kernel') or 'kernel'}.py"
        job.module = {**job.module, "file": str(module_file)}
    # Every tensor its own allocation: torch's caching allocator would hide an access past
    # one tensor's end inside its neighbour.
    env = {**env, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    for tool in TOOLS:
        log = folder / f"{tool}.log"
        started = time.monotonic()
        outcome = run_worker(
            job,
            options.timeout_s,
            [sanitizer, "--tool", tool, "--log-file", str(log), "--print-limit", "10000", *command],
            cancel,
            env,
        )
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        accesses = merged(parse_report(text, tool))
        report.tools[tool] = {
            "errors": len(accesses),
            "summary": summary(text),
            "seconds": round(time.monotonic() - started, 2),
            "run": "ok" if outcome.ok else outcome.message,
            "log": str(log),
        }
        report.findings += [
            access_finding(a, module_file, rendered, instance, models) for a in accesses
        ]
        if not accesses and not outcome.ok:
            report.findings.append(
                _instance_finding(
                    instance, "KT723", Severity.ERROR, f"under {tool}: {outcome.message}", models
                )
            )
    report.ok = not report.findings
    return report


def _instance_finding(
    instance: InstanceSpec, code: str, severity: Severity, message: str, models: ModelCache
) -> Finding:
    line = _declaration_line(instance, models)
    rng = line_range(models.model(str(instance.template)), line)
    return Finding(
        code, severity, rng, message, str(instance.template), instance.name, "kls-sanitize"
    )
