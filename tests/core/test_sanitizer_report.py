"""compute-sanitizer's reports read and mapped home (no GPU): report text written here in the
tool's format (its memcheck and racecheck layouts over its versions), each access made a
finding at the template line that produced it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kls.bench.sanitize import (
    access_finding,
    place_of,
    probe_failure,
    sanitize_instance,
    sanitizer_problem,
)
from kls.bench.sanitizer_report import Location, merged, parse_report, summary
from kls.instances import load_instances
from kls.render import RenderResult
from kls.sandbox.workers import render_isolated
from tests.upstream import needs_torch, needs_torch_source

MODULE = "/tmp/kls-sanitize-x1/triton_mm.py"
SIZE = "2,096,128 bytes"
HOST_ERROR = (
    'CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call '
    "to cuStreamSynchronize."
)

# memcheck, current layout: the kernel+PC, then the module's file and line; two threads at
# one PC, one at another, then the host-side error the fault caused.
MEMCHECK = f"""\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at triton_mm+0x1b70 in {MODULE}:71
=========     by thread (64,0,0) in block (15,0,0)
=========     Address 0x7f3c2e600400 is out of bounds
=========     and is 1,024 bytes after the nearest allocation at 0x7f3c2e400000 of size {SIZE}
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: launch [0x1a2b3] in cuda_utils.so
=========
========= Invalid __global__ read of size 2 bytes
=========     at triton_mm+0x1b70 in {MODULE}:71
=========     by thread (65,0,0) in block (15,0,0)
=========     Address 0x7f3c2e600402 is out of bounds
=========
========= Invalid __global__ write of size 2 bytes
=========     at triton_mm+0x2f10 in {MODULE}:98
=========     by thread (0,0,0) in block (3,0,0)
=========     Address 0x7f3c2e700000 is out of bounds
=========
========= Program hit {HOST_ERROR}
=========
the worker's own line, not the tool's
========= ERROR SUMMARY: 4 errors
"""

# memcheck's older layout: the PC alone, then file:line:function.
OLD_LAYOUT = """\
========= CUDA-MEMCHECK
========= Invalid __shared__ write of size 4
=========     at 0x00000c40 in /work/proj/kernel.py:12:scale_kernel
=========     by thread (31,0,0) in block (0,0,0)
=========     Address 0x00010000 is out of bounds
=========
========= Misaligned Shared or Local Address
=========     at 0x00000d00 in scale_kernel
=========     by thread (0,0,0) in block (1,0,0)
=========
========= ERROR SUMMARY: 2 errors
"""

# racecheck: analysis mode (a pair of accesses, their hazard count) and hazard mode.
RACECHECK = f"""\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at triton_mm+0x9a0 in {MODULE}:64
=========     and Read access at triton_mm+0xb20 in {MODULE}:71 [16,384 hazards]
=========
========= Warning: Race reported between Read access at triton_mm+0xb20 in {MODULE}:71
=========     and Write access at triton_mm+0x9a0 in {MODULE}:64 [512 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""

HAZARDS = f"""\
========= ERROR: Potential WAR hazard detected at __shared__ 0x80 in block (2,0,0) :
=========     Read Thread (31,0,0) at triton_mm+0xb20 in {MODULE}:71
=========     Write Thread (0,1,0) at triton_mm+0x9a0 in {MODULE}:64
=========     Current Value : 0, Incoming Value : 1
=========
"""


def test_memcheck_errors_with_kernel_pc_file_and_line() -> None:
    found = parse_report(MEMCHECK, "memcheck")
    assert [a.what for a in found] == [
        "Invalid __global__ read of size 2 bytes",
        "Invalid __global__ read of size 2 bytes",
        "Invalid __global__ write of size 2 bytes",
        "the program hit a CUDA error",
    ]
    first = found[0]
    assert first.location == Location("triton_mm", "0x1b70", MODULE, 71)
    assert first.thread == "(64,0,0) in block (15,0,0)"
    assert first.detail.startswith("Address 0x7f3c2e600400 is out of bounds and is 1,024 bytes")
    assert found[3].location is None and "CUDA_ERROR_LAUNCH_FAILED" in found[3].detail
    assert summary(MEMCHECK) == ["ERROR SUMMARY: 4 errors"]
    # One finding per line: the two threads at one PC are one access, counted.
    lines = [(a.what, a.location.line if a.location else None, a.count) for a in merged(found)]
    assert lines == [
        ("Invalid __global__ read of size 2 bytes", 71, 2),
        ("Invalid __global__ write of size 2 bytes", 98, 1),
        ("the program hit a CUDA error", None, 1),
    ]


def test_device_frames_of_inlined_code() -> None:
    """The PC's line in triton's own language file (a helper inlined into the kernel), the
    kernel's line in a device frame under it; both frame layouts."""
    inlined = (
        "========= Invalid __global__ read of size 4 bytes\n"
        "=========     at triton_mm+0x2200 in /venv/triton/language/standard.py:40\n"
        "=========     by thread (1,0,0) in block (0,0,0)\n"
        f"=========     Device Frame: triton_mm+0x2200 in {MODULE}:66\n"
        "=========     Device Frame:/tmp/old/triton_mm.py:70:triton_mm (triton_mm : 0x2200)\n"
    )
    [access] = parse_report(inlined, "memcheck")
    assert access.location == Location(
        "triton_mm", "0x2200", "/venv/triton/language/standard.py", 40
    )
    assert access.frames == (
        Location("triton_mm", "0x2200", MODULE, 66),
        Location("triton_mm", "", "/tmp/old/triton_mm.py", 70),
    )


def test_older_layout_and_no_line_info() -> None:
    found = parse_report(OLD_LAYOUT, "memcheck")
    assert found[0].location == Location("scale_kernel", "0x00000c40", "/work/proj/kernel.py", 12)
    assert found[1].what == "Misaligned Shared or Local Address"
    assert found[1].location == Location("scale_kernel", "0x00000d00")  # no file, no line


def test_racecheck_pairs_and_hazards() -> None:
    races = parse_report(RACECHECK, "racecheck")
    assert [(r.what, r.detail) for r in races] == [
        ("race (error): Write access and Read access", "16,384 hazards"),
        ("race (warning): Read access and Write access", "512 hazards"),
    ]
    assert races[0].location == Location("triton_mm", "0x9a0", MODULE, 64)
    assert races[0].other == Location("triton_mm", "0xb20", MODULE, 71)
    [hazard] = parse_report(HAZARDS, "racecheck")
    assert hazard.what == "WAR hazard on shared memory"
    assert hazard.location is not None and hazard.location.line == 71
    assert hazard.other is not None and hazard.other.line == 64


def test_a_clean_report_has_nothing() -> None:
    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    assert parse_report(clean, "memcheck") == []
    assert parse_report("", "racecheck") == []


def test_a_refused_device_is_said_in_one_line() -> None:
    refused = (
        "========= COMPUTE-SANITIZER\n"
        "========= Error: Device not supported. Please refer to the documentation.\n"
        "========= Error: Target application terminated before first instrumented API call\n"
    )
    assert (
        probe_failure(refused, 1)
        == "Error: Device not supported. Please refer to the documentation."
    )
    assert probe_failure("", 3) == "the probe exited with status 3"


def _mm(tmp_path: Path) -> Path:
    config = tmp_path / "kls.toml"
    config.write_text(
        '[instances.mm]\nprofile = "triton"\n'
        'template = "torch:_inductor/kernel/templates/triton_mm.py.jinja"\n'
        'tensors.A = { shape = [100, 200], dtype = "bf16" }\n'
        'tensors.B = { shape = [200, 72], dtype = "bf16" }\n'
        'tensors.out = { shape = [100, 72], dtype = "bf16" }\n'
        "vars = { BLOCK_M = 64, BLOCK_N = 64, BLOCK_K = 32, GROUP_M = 8, EVEN_K = false, "
        'ALLOW_TF32 = false, USE_FAST_ACCUM = false, ACC_TYPE = "tl.float32" }\n'
    )
    return config


@needs_torch
@needs_torch_source
@pytest.mark.slow
def test_an_access_lands_on_the_template_line_that_made_it(tmp_path: Path) -> None:
    spec = load_instances(_mm(tmp_path)).instances["mm"]
    rendered: RenderResult = render_isolated(spec)
    assert rendered.text is not None, [f.message for f in rendered.findings]
    module_lines = rendered.text.split("\n")
    load_b = next(i for i, t in enumerate(module_lines) if t.strip().startswith("b = tl.load(B"))
    store = next(i for i, t in enumerate(module_lines) if "tl.store(out_ptr0" in t)
    module_file = tmp_path / "run" / "triton_mm.py"
    report = (
        "========= Invalid __global__ read of size 2 bytes\n"
        f"=========     at triton_mm+0x1c40 in {module_file}:{load_b + 1}\n"
        "=========     by thread (3,0,0) in block (1,0,0)\n"
        "=========     Address 0x7f0000000000 is out of bounds\n"
        "=========\n"
        "========= Invalid __global__ write of size 2 bytes\n"
        f"=========     at triton_mm+0x2e00 in {module_file}:{store + 1}\n"
        "=========     by thread (0,0,0) in block (0,0,0)\n"
        "=========     Address 0x7f0000100000 is out of bounds\n"
    )
    read, write = (
        access_finding(a, module_file, rendered, spec) for a in parse_report(report, "memcheck")
    )
    template = Path(read.path).read_text().split("\n")
    assert read.path == write.path == str(spec.template)
    assert (read.code, write.code) == ("KT720", "KT720")
    assert 'load_input("B"' in template[read.range.start.line]
    assert "store_output" in template[write.range.start.line]
    assert f"triton_mm.py line {load_b + 1}" in read.message
    assert "thread (3,0,0) in block (1,0,0): Address 0x7f0000000000 is out of bounds" in (
        read.message
    )
    # The PC in an inlined helper's file, the kernel's line in a device frame: that line.
    inlined = (
        "========= Invalid __global__ read of size 2 bytes\n"
        "=========     at triton_mm+0x1c40 in /venv/triton/language/standard.py:40\n"
        f"=========     Device Frame: triton_mm+0x1c40 in {module_file}:{load_b + 1}\n"
    )
    [via_frame] = [
        access_finding(a, module_file, rendered, spec) for a in parse_report(inlined, "memcheck")
    ]
    assert via_frame.range.start.line == read.range.start.line
    assert f"triton_mm.py line {load_b + 1}" in via_frame.message
    # A location without line info, or in a file the render did not read: the declaration.
    place, exact = place_of(Location("triton_mm", "0x10"), module_file, rendered, spec)
    assert not exact and "def_kernel" in template[place.line]
    elsewhere = Location("triton_mm", "0x10", "/elsewhere/other.py", 3)
    assert not place_of(elsewhere, module_file, rendered, spec)[1]


def test_a_line_in_the_template_itself_stands(tmp_path: Path) -> None:
    """A CUDA template built with `#line` directives: the report names the template's line."""
    template = tmp_path / "k.cu.jinja"
    template.write_text('{{kernel.def_kernel(inputs=[X], outputs=[Y], names_str="X, Y")}}\n{\n}\n')
    (tmp_path / "kls.toml").write_text(
        '[instances.k]\ntemplate = "k.cu.jinja"\nreference = "none"\n'
        'tensors.X = { shape = [8], dtype = "fp32" }\ntensors.Y = { shape = [8], dtype = "fp32" }\n'
    )
    spec = load_instances(tmp_path / "kls.toml").instances["k"]
    rendered = RenderResult(spec, "x", None, [], [])
    place, exact = place_of(Location("k", "0x40", str(template), 2), None, rendered, spec)
    assert exact and (place.path, place.line) == (str(template), 1)


def test_a_missing_sanitizer_is_one_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no" / "compute-sanitizer"
    monkeypatch.setenv("KLS_COMPUTE_SANITIZER", str(missing))
    problem = sanitizer_problem(str(missing), "python3")
    assert problem is not None and problem.startswith("sanitizer unavailable: no compute-sanitizer")
    template = tmp_path / "k.cu.jinja"
    template.write_text('// k\n{{kernel.def_kernel(inputs=[X], outputs=[Y], names_str="X, Y")}}\n')
    (tmp_path / "kls.toml").write_text(
        '[instances.k]\ntemplate = "k.cu.jinja"\nreference = "none"\n'
        'tensors.X = { shape = [8], dtype = "fp32" }\ntensors.Y = { shape = [8], dtype = "fp32" }\n'
    )
    report = sanitize_instance(load_instances(tmp_path / "kls.toml").instances["k"])
    assert not report.ok
    [finding] = report.findings
    assert (finding.code, finding.range.start.line) == ("KT722", 1)  # at def_kernel
    assert "sanitizer unavailable" in finding.message and report.headline().startswith("✗")
