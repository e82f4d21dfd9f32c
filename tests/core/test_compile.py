"""Compile with the real nvcc and the real CUTLASS headers (CI has nvcc, no GPU).

CUTLASS compiles cost seconds each on 2 cores, so only a few tests run one.
"""

from __future__ import annotations

import ctypes
import shutil
import threading
import time
from pathlib import Path

import pytest

from kls.compile import CompileOptions, compile_instance
from kls.compile.cache import CompileCache
from kls.compile.diagnostics import parse_nvcc
from kls.compile.run import CompileCancelled
from kls.instances import load_instances

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture
def work(workspace: Path) -> Path:
    return workspace


def plant(work: Path, file: str, old: str, new: str) -> tuple[int, int]:
    """Replace `old` by `new` in a template; the (line, column) where `new` starts."""
    path = work / file
    text = path.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    path.write_text(text)
    at = text.index(new)
    return text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)


def instance(work: Path, name: str):  # type: ignore[no-untyped-def]
    return load_instances(work / "kls.toml").instances[name]


def test_build_plain_cuda_exports_the_entry(work: Path, tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    result = compile_instance(
        instance(work, "softmax_f32_4096x1024"), CompileOptions(mode="build"), cache=cache
    )
    assert result.ok, result.log
    assert result.artifact is not None and result.artifact.is_file()
    lib = ctypes.CDLL(str(result.artifact))
    assert hasattr(lib, "kls_softmax_f32_4096x1024")
    assert "-shared" in result.command and "-Xcompiler=-fPIC" in result.command


def test_typo_lands_on_the_template_token(work: Path, tmp_path: Path) -> None:
    line, col = plant(
        work, "softmax.cu.jinja", "fmaxf(row_max, static_cast", "fmaxf(row_maxx, static_cast"
    )
    result = compile_instance(
        instance(work, "softmax_bf16_8192x4096"), CompileOptions(), cache=CompileCache(tmp_path)
    )
    assert not result.ok
    first = result.findings[0]
    assert first.code == "KT601" and first.source == "nvcc"
    assert first.path == str(work / "softmax.cu.jinja")
    assert (first.range.start.line, first.range.start.column) == (line, col + len("fmaxf("))
    assert first.range.end.column == col + len("fmaxf(row_maxx")
    assert 'identifier "row_maxx" is undefined' in first.message


def test_cache_hit_and_cached_failure(work: Path, tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    plant(work, "softmax.cu.jinja", "const float scale", "const flot scale")
    spec = instance(work, "softmax_f32_4096x1024")
    starts: list[int] = []
    first = compile_instance(
        spec, CompileOptions(), cache=cache, on_nvcc_start=lambda: starts.append(1)
    )
    again = compile_instance(
        spec, CompileOptions(), cache=cache, on_nvcc_start=lambda: starts.append(1)
    )
    assert not first.ok and not again.ok
    assert again.cached and not first.cached
    assert starts == [1]
    assert [f.message for f in again.findings] == [f.message for f in first.findings]


def test_concurrent_compiles_of_one_key_run_nvcc_once(work: Path, tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    spec = instance(work, "softmax_f32_4096x1024")
    starts: list[int] = []
    results = []

    def one() -> None:
        results.append(
            compile_instance(
                spec, CompileOptions(), cache=cache, on_nvcc_start=lambda: starts.append(1)
            )
        )

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert starts == [1]
    assert all(r.ok for r in results) and sum(r.cached for r in results) == 2


def test_missing_nvcc_is_one_clear_finding(work: Path, tmp_path: Path) -> None:
    result = compile_instance(
        instance(work, "softmax_f32_4096x1024"),
        CompileOptions(nvcc=str(tmp_path / "no-nvcc")),
        cache=CompileCache(tmp_path),
    )
    assert [f.code for f in result.findings] == ["KT604"]
    assert "kls.nvccPath" in result.findings[0].message


def test_render_failure_is_the_finding_and_nvcc_never_runs(work: Path, tmp_path: Path) -> None:
    plant(work, "softmax.cu.jinja", 'names_str="X, Y"', 'names_str="X"')
    starts: list[int] = []
    result = compile_instance(
        instance(work, "softmax_f32_4096x1024"),
        CompileOptions(),
        cache=CompileCache(tmp_path),
        on_nvcc_start=lambda: starts.append(1),
    )
    assert [f.code for f in result.findings] == ["KT201"] and starts == []


def test_wrong_type_in_argument_sub_template_lands_on_its_line(work: Path, tmp_path: Path) -> None:
    line, _ = plant(work, "cutlass2x_args.cuh.jinja", "const int64_t ldb =", "const int64_t* ldb =")
    result = compile_instance(
        instance(work, "sm80_bf16_4096"), CompileOptions(), cache=CompileCache(tmp_path)
    )
    assert not result.ok
    first = result.findings[0]
    assert first.path == str(work / "cutlass2x_args.cuh.jinja")
    assert first.range.start.line == line
    assert first.code == "KT601"


def test_wrong_tile_shape_in_instance_definition(work: Path, tmp_path: Path) -> None:
    """A bad tile inside `instance_definition` fails deep in CUTLASS; kls follows the
    instantiation chain back to the template line that first instantiates the kernel type."""
    plant(
        work,
        "cutlass2x_gemm.cu.jinja",
        "{{instance_definition}}",
        '{{instance_definition | replace("GemmShape<64, 64, 64>", "GemmShape<64, 48, 64>")}}',
    )
    result = compile_instance(
        instance(work, "sm80_bf16_4096"), CompileOptions(), cache=CompileCache(tmp_path)
    )
    assert not result.ok
    first = result.findings[0]
    assert first.path == str(work / "cutlass2x_gemm.cu.jinja")
    assert first.related and first.related[0].path.endswith((".h", ".hpp", ".cuh"))
    text = (work / "cutlass2x_gemm.cu.jinja").read_text().split("\n")
    assert text[first.range.start.line].strip() == (
        "using ElementComputeEpilogue = {{instance_type}}::ElementAccumulator;"
    )
    assert "divisible by warp-scoped GEMM size" in first.message


def test_check_sm90_cutlass_instance(work: Path, tmp_path: Path) -> None:
    result = compile_instance(
        instance(work, "sm90_bf16_4096_bias"), CompileOptions(), cache=CompileCache(tmp_path)
    )
    assert result.ok, result.log[-2000:]
    assert result.findings == []


def test_cancel_kills_nvcc_and_its_children(work: Path, tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    cancel = threading.Event()
    started = threading.Event()
    outcome: list[object] = []

    def run() -> None:
        try:
            compile_instance(
                instance(work, "sm80_bf16_4096"),
                CompileOptions(),
                cancel=cancel,
                cache=cache,
                on_nvcc_start=started.set,
            )
            outcome.append("finished")
        except CompileCancelled:
            outcome.append("cancelled")

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(30)
    time.sleep(0.5)
    assert living_processes_naming(str(tmp_path)), "nvcc is not running: nothing to cancel"
    cancel.set()
    thread.join(30)
    assert outcome == ["cancelled"]
    # SIGKILL is sent to nvcc's whole group at once, but under load a killed child may take a
    # moment to exit (it once was still listed right after the cancel): wait a little for the
    # group to be gone. nvcc would run seconds more, so a leaked one is still alive after the
    # wait; a zombie has already exited.
    deadline = time.monotonic() + 2
    while (left := living_processes_naming(str(tmp_path))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []


def living_processes_naming(text: str) -> list[str]:
    """The command lines of live (not zombie) processes that contain `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes()
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # it exited meanwhile
        if text.encode() in command and state != "Z":
            found.append(command.replace(b"\0", b" ").decode(errors="replace"))
    return found


def test_timeout_is_a_finding(work: Path, tmp_path: Path) -> None:
    result = compile_instance(
        instance(work, "sm80_bf16_4096"),
        CompileOptions(timeout_s=0.3),
        cache=CompileCache(tmp_path),
    )
    assert not result.ok
    assert result.findings[0].code == "KT603"


def test_parse_nvcc_formats() -> None:
    log = (
        'kernel.cu(57): error: identifier "row_maxx" is undefined\n'
        "      row_max = fmaxf(row_maxx, x);\n"
        "                      ^\n\n"
        "/opt/cutlass/include/cute/x.hpp(10): error: static assertion failed\n"
        "          detected during:\n"
        '            instantiation of "void f<T>()" at line 88 of kernel.cu\n'
        "kernel.cu:12:5: error: host compiler says no\n"
    )
    msgs = parse_nvcc(log)
    assert [(m.file, m.line, m.column) for m in msgs] == [
        ("kernel.cu", 57, 20),
        ("/opt/cutlass/include/cute/x.hpp", 10, None),
        ("kernel.cu", 12, 4),
    ]
    assert msgs[1].sites == [("kernel.cu", 88)]


def test_built_library_answers_the_workspace_query_without_a_gpu(
    work: Path, tmp_path: Path
) -> None:
    """The worker's exact call path against a real library: the query returns before any CUDA
    call in the plain template, so it runs on a machine without a GPU."""
    import ctypes as c

    from kls.bench import marshal
    from kls.bench.worker import load_entry

    spec = instance(work, "softmax_f32_4096x1024")
    built = compile_instance(spec, CompileOptions(mode="build"), cache=CompileCache(tmp_path))
    assert built.ok and built.artifact is not None
    fn = load_entry(str(built.artifact), spec.kernel_name, 2)
    size = c.c_size_t(12345)
    call = marshal.workspace_query(["X", "Y"], c.addressof(size), 0)
    assert fn(*call.args()) == 0
    assert size.value == 0


def test_old_nvcc_and_missing_cutlass_are_clear_findings(work: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    fake.chmod(0o755)
    spec = instance(work, "softmax_f32_4096x1024")
    old = compile_instance(spec, CompileOptions(nvcc=str(fake)), cache=CompileCache(tmp_path))
    assert [f.code for f in old.findings] == ["KT604"] and "too old" in old.findings[0].message
    empty = tmp_path / "no-cutlass"
    empty.mkdir()
    missing = compile_instance(
        spec, CompileOptions(cutlass_include=str(empty)), cache=CompileCache(tmp_path)
    )
    assert [f.code for f in missing.findings] == ["KT605"]
    assert "nvidia-cutlass" in missing.findings[0].message


def test_hundreds_of_errors_are_capped(work: Path) -> None:
    from kls.compile.diagnostics import MAX_FINDINGS, map_messages
    from kls.render import render

    spec = instance(work, "softmax_f32_4096x1024")
    rendered = render(spec)
    lines = (rendered.text or "").count("\n")
    log = "".join(
        f'kernel.cu({1 + i % lines}): error: identifier "x{i}" is undefined\n' for i in range(500)
    )
    findings = map_messages(parse_nvcc(log), Path("/c/kernel.cu"), rendered)
    assert len(findings) == MAX_FINDINGS
    assert findings[0].message.startswith('nvcc: identifier "x0"')


def test_library_without_the_entry_is_a_clear_message(work: Path, tmp_path: Path) -> None:
    from kls.bench.worker import StageError, load_entry

    spec = instance(work, "softmax_f32_4096x1024")
    built = compile_instance(spec, CompileOptions(mode="build"), cache=CompileCache(tmp_path))
    assert built.artifact is not None
    with pytest.raises(StageError, match="does not export 'kls_nope'"):
        load_entry(str(built.artifact), "kls_nope", 2)
