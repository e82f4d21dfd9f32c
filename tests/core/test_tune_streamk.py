"""kls's own stream-K GEMM (templates/cutlass3x_streamk_gemm.cu.jinja, profile
torch-2.11-streamk): the scheduler's arguments in the C signature and the arguments struct,
the tune space over them (count, refusals, likes, cap), the per-M dispatch, its results
(format 2 and 1 still read) and `--apply` writing it; a real nvcc build whose exported
entry takes them (checked with nm and ctypes, no GPU needed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kls.tune.executors as executors
from kls.instances import InstanceSpec, load_instances
from kls.profiles import profile
from kls.profiles.torch211.scheduler import scheduler_setting
from kls.render import render
from kls.tune.apply import apply_dispatch
from kls.tune.candidates import RUNTIME_SETTINGS_CAP, make_candidates, runtime_settings
from kls.tune.dispatch import bucket_choices, buckets, buckets_to_apply
from kls.tune.results import (
    FORMAT_VERSION,
    BucketChoice,
    Choice,
    TuneResult,
    read_results,
)
from kls.tune.runner import TuneOptions
from kls.tune.space import TuneSpace, load_space
from kls.tune.timing import shape_plan
from tests.upstream import needs_torch_source

pytestmark = needs_torch_source

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
FAKE_WORKER = [sys.executable, str(Path(__file__).parent / "tune_fake_worker.py")]
SK = "sm90_streamk_bf16"
SCHEDULER = ("swizzle", "splits", "decomposition", "reduction", "raster")


def spec_of(config: Path, name: str = SK) -> InstanceSpec:
    return load_instances(config).instances[name]


def _with_vars(spec: InstanceSpec, **values: int) -> InstanceSpec:
    import dataclasses

    return dataclasses.replace(spec, variables={**spec.variables, **values})


@pytest.mark.slow
def test_the_signature_and_the_arguments_struct_take_the_scheduler_at_run_time() -> None:
    spec = _with_vars(spec_of(TEMPLATES / "kls.toml"), splits=3, decomposition=2, raster=2)
    rendered = render(spec)
    text = rendered.text
    assert text is not None, [f.message for f in rendered.findings]
    signature = next(line for line in text.splitlines() if line.startswith("PT_EXPORT int "))
    tail = signature.split("const int Y_offset, ")[1]
    assert tail.startswith(
        "const uint8_t swizzle,const int splits,const uint8_t decomposition,"
        "const uint8_t reduction,const uint8_t raster, size_t* workspace_size"
    )
    for field, value in [
        ("max_swizzle_size", "swizzle"),
        ("splits", "splits"),
        ("decomposition_mode", "static_cast<sched::DecompositionMode>(decomposition)"),
        ("reduction_mode", "static_cast<sched::ReductionMode>(reduction)"),
        ("raster_order", "static_cast<sched::RasterOrderOptions>(raster)"),
    ]:
        assert f"arguments.scheduler.{field} = {value};" in text
    # The values are the caller's: the call passes the instance's, in the signature's order.
    extra = profile(spec.profile).call_arguments(rendered.kernel)
    assert extra[-5:] == [
        ("const uint8_t", 1),
        ("const int", 3),
        ("const uint8_t", 2),
        ("const uint8_t", 0),
        ("const uint8_t", 2),
    ]
    # One build serves every schedule and every shape: the source does not change.
    other = _with_vars(spec, splits=1, decomposition=3, reduction=1, swizzle=8)
    from kls.tune.candidates import at_shape

    assert render(other).text == text
    assert render(at_shape(spec, (128, 14336, 4096))).text == text


@pytest.mark.slow
def test_an_op_without_the_stream_k_scheduler_is_refused_with_what_to_do() -> None:
    import dataclasses

    spec = spec_of(TEMPLATES / "kls.toml")
    plain = spec.op.replace("_stream_k_", "_") if spec.op else ""
    rendered = render(dataclasses.replace(spec, op=plain))
    assert rendered.text is None
    assert any("no stream-K tile scheduler" in f.message for f in rendered.findings)
    verdicts = list(profile(spec.profile).op_verdicts(spec))
    accepted = [v.op for v in verdicts if v.choice is not None]
    assert accepted and all("_stream_k_" in op for op in accepted)
    refused = [v for v in verdicts if v.op == plain]
    assert refused and "with '_stream_k_' in its name" in refused[0].reason


@pytest.mark.parametrize(
    "values, expected",
    [
        ((1, 1, 0, 0, 0), (1, 0, 0)),  # heuristic stays heuristic
        ((1, 2, 0, 1, 0), (2, 2, 1)),  # heuristic with 2 splits is split-K with 2
        ((1, 1, 2, 1, 0), (1, 1, 0)),  # split-K with one split is data-parallel
        ((1, 1, 1, 1, 0), (1, 1, 0)),  # data-parallel reduces nothing
        ((1, 1, 3, 1, 0), (1, 3, 1)),  # stream-K keeps its reduction mode
        ((1, 2, 1, 0, 0), None),  # more than one split needs split-K (can_implement)
        ((1, 4, 3, 0, 0), None),
        ((1, 0, 0, 0, 0), None),  # out of range
        ((1, 1, 4, 0, 0), None),
        ((1, 1, 0, 2, 0), None),
        ((1, 1, 0, 0, 3), None),
    ],
)
def test_scheduler_settings_in_canonical_form(
    values: tuple[int, ...], expected: tuple[int, int, int] | None
) -> None:
    got = scheduler_setting(dict(zip(SCHEDULER, values)))
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert (got["splits"], got["decomposition"], got["reduction"]) == expected


def test_the_shipped_space_counts_refusals_and_likes_and_is_capped() -> None:
    spec = spec_of(TEMPLATES / "kls.toml")
    space = load_space(spec)
    assert space.dispatch == "mn" and len(space.shapes) == 12
    combos, counts = runtime_settings(spec, space)
    # decomposition 4 x splits 3 x reduction 2 x raster 2 x swizzle 2 listed
    assert counts == dict(listed=96, refused=32, alike=28, distinct=36, timed=36, cap=64)
    assert len(combos) == 36 and RUNTIME_SETTINGS_CAP == 64
    assert all(scheduler_setting({**spec.variables, **c}) is not None for c in combos)
    capped, small = runtime_settings(spec, space, cap=10)
    assert small["timed"] == 10 and small["distinct"] == 36
    own = {k: spec.variables[k] for k in combos[0]}
    assert own in capped  # the instance's own setting is always timed
    assert capped[:9] == [combos[i * 36 // 10] for i in range(9)]


@pytest.mark.slow
def test_the_shipped_candidates_are_the_stream_k_ops_times_the_settings() -> None:
    spec = spec_of(TEMPLATES / "kls.toml")
    cs = make_candidates(spec, load_space(spec))
    assert (cs.total_ops, cs.distinct_ops, cs.filtered_ops) == (137, 70, 12)
    assert len(cs.candidates()) == 12 * 36 and cs.runtime_space["timed"] == 36
    assert all("_stream_k_" in u.choice.op for u in cs.units)


@pytest.mark.slow
def test_the_call_arguments_of_a_shape_carry_each_setting() -> None:
    spec = spec_of(TEMPLATES / "kls.toml")
    cs = make_candidates(spec, TuneSpace(contains=("128x256x64_2x1x1",)))
    plan = shape_plan(spec, cs.units[0], (128, 6144, 4096))
    args = plan.args_for({"splits": 4, "decomposition": 2, "raster": 1})
    assert [a[1] for a in args[:3]] == [128, 6144, 4096]  # M, N, K
    assert [tuple(a) for a in args[-5:]] == [
        ("const uint8_t", 1),
        ("const int", 4),
        ("const uint8_t", 2),
        ("const uint8_t", 0),
        ("const uint8_t", 1),
    ]


def _choice(unit: str, ratios: dict[str, float]) -> Choice:
    return Choice(unit, f"op_{unit}", {"splits": 1}, None, ratios)


def test_each_m_bucket_gets_its_best_configuration() -> None:
    keys = ["128x4096x4096", "128x6144x4096", "2048x4096x4096", "8192x4096x4096"]
    assert buckets(keys) == [
        (0, 128, keys[:2]),
        (128, 2048, [keys[2]]),
        (2048, None, [keys[3]]),
    ]
    choices = [
        _choice("a", {keys[0]: 1.2, keys[1]: 1.2, keys[2]: 0.9, keys[3]: 1.0}),
        _choice("b", {keys[0]: 0.9, keys[1]: 0.9, keys[2]: 1.1, keys[3]: 1.05}),
        _choice("c", {keys[0]: 2.0, keys[2]: 2.0}),  # not verified at 128x6144x4096
    ]
    got = bucket_choices(choices, keys)
    assert [(b.m_above, b.m_upto, b.choice.unit) for b in got] == [
        (0, 128, "a"),
        (128, 2048, "c"),
        (2048, None, "b"),
    ]
    assert got[0].choice.geomean_vs_cublas == pytest.approx(1.2)
    assert got[0].choice.per_shape == {keys[0]: 1.2, keys[1]: 1.2}
    assert bucket_choices(choices, keys[:2]) == []  # one M: nothing to dispatch on


def test_results_format_2_round_trips_and_format_1_still_reads(tmp_path: Path) -> None:
    result = TuneResult("i", "t", "c", "local", 0.0, ["128x8x8", "256x8x8"])
    result.runtime_space = dict(listed=96, refused=32, alike=28, distinct=36, timed=36, cap=64)
    choice = Choice("u1", "op1", {"splits": 2, "decomposition": 2}, 1.1, {"128x8x8": 1.1})
    result.dispatch = [BucketChoice(0, 128, ["128x8x8"], choice)]
    data = result.to_json()
    assert data["format_version"] == FORMAT_VERSION == 3
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    back = read_results(path)
    assert back.runtime_space == result.runtime_space
    assert back.dispatch == result.dispatch and isinstance(back.dispatch[0].choice, Choice)
    old = {k: v for k, v in data.items() if k not in ("runtime_space", "dispatch")}
    old["format_version"] = 1
    path.write_text(json.dumps(old))
    first = read_results(path)
    assert first.dispatch == [] and first.runtime_space == {}
    broken = dict(data, dispatch=[{"m_above": 0, "m_upto": 128, "shapes": []}])
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"dispatch\[0\] lacks choice"):
        read_results(path)


def _small_streamk_space(config: Path, dispatch: str = "m") -> None:
    """The shipped stream-K table at level "0", two ops, four settings, four shapes."""
    text = config.read_text()
    table = (
        "[instances.sm90_streamk_bf16.tune]\n"
        "# the small space of the test\n"
        'op_filter = { contains = ["x64_2x1x1"] }\n'
        "decomposition = [1, 2]\nsplits = [1, 2]\nswizzle = [1]\n"
        f'dispatch = "{dispatch}"\n'
        "shapes = [[128, 4096, 4096], [128, 6144, 4096], [2048, 4096, 4096], "
        "[8192, 4096, 4096]]\n\n"
    )
    text, n = re.subn(
        r"\[instances\.sm90_streamk_bf16\.tune\]\n(?:.*\n)*?\]\n\n", table, text, count=1
    )
    assert n == 1
    config.write_text(text)


def _fake_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def build(task: executors.BuildTask, cancel: object = None) -> executors.BuildOutcome:
        lib = tmp_path / f"fake_{task.id}.so"
        lib.write_bytes(task.id.encode())
        return executors.BuildOutcome(task.id, True, seconds=0.1, artifact=str(lib))

    monkeypatch.setattr(executors, "build_task", build)


@pytest.mark.slow
def test_a_tune_times_the_settings_and_apply_writes_the_dispatch(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stand-in builds and GPU worker: stage 2 times every setting the profile keeps (split-K
    with one split is data-parallel, data-parallel with two splits is refused), each M bucket
    gets a configuration, and --apply writes one instance per bucket into kls.toml."""
    import functools

    import kls.tune.runner as runner
    from kls.cli import main
    from kls.tune.results import read_results

    config = project / "kls.toml"
    _small_streamk_space(config)
    _fake_builds(monkeypatch, tmp_path)
    spec = spec_of(config)
    # `kls tune --apply` as typed, with the stand-in GPU worker.
    monkeypatch.setattr(runner, "TuneOptions", functools.partial(TuneOptions, worker=FAKE_WORKER))
    code = main(["tune", str(spec.template), "-i", SK, "--config", str(config), "--apply"])
    assert code == 0
    result = read_results(project / ".kls" / "tune" / SK / "results.json")
    assert result.runtime_space == dict(listed=4, refused=1, alike=1, distinct=2, timed=2, cap=64)
    stage2 = {json.dumps(m.vars, sort_keys=True) for m in result.measurements if m.stage == 2}
    assert stage2 == {
        json.dumps({"decomposition": 1, "splits": 1, "swizzle": 1}, sort_keys=True),
        json.dumps({"decomposition": 2, "splits": 2, "swizzle": 1}, sort_keys=True),
    }
    assert [(b.m_above, b.m_upto) for b in result.dispatch] == [(0, 128), (128, 2048), (2048, None)]
    text = config.read_text()
    assert "# the small space of the test" in text  # comments stay
    assert "# dispatch of sm90_streamk_bf16 (kls tune --apply): 128 < M <= 2048" in text
    loaded = load_instances(config)
    assert not [f for f in loaded.findings if f.severity.name == "ERROR"]
    for bucket, m in zip(result.dispatch, (128, 2048, 8192), strict=True):
        inst = loaded.instances[f"{SK}_m{m}"]
        assert inst.op == bucket.choice.op and inst.profile == "torch-2.11-streamk"
        assert {k: inst.variables[k] for k in bucket.choice.vars} == bucket.choice.vars
        x, y = inst.tensors["X"], inst.tensors["Y"]
        assert x is not None and y is not None and x.shape[0] == m and y.shape[0] == m
        assert inst.kernel_name == f"kls_{SK}_m{m}"  # its own entry, Inductor's convention
    # Applying again replaces the buckets' op and variables in place.
    again = apply_dispatch(config, SK, buckets_to_apply(result, spec))
    assert len(again) == 3 and all(", new)" not in line for line in again)
    assert config.read_text().count(f"[instances.{SK}_m128]") == 1


@pytest.mark.slow
def test_a_tune_with_dispatch_mn_applies_an_instance_for_the_n_another_configuration_wins(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above with `dispatch = "mn"` and stand-in timings that differ by N: at M = 128,
    N = 6144 is won by another configuration than the bucket's, and --apply writes
    sm90_streamk_bf16_m128_n6144 with its tensors at M = 128 and N = 6144 beside the M buckets'
    instances."""
    import functools

    import kls.tune.runner as runner
    from kls.cli import main
    from kls.tune.results import read_results

    config = project / "kls.toml"
    _small_streamk_space(config, dispatch="mn")
    _fake_builds(monkeypatch, tmp_path)
    # The stand-in's timings are a hash of library, setting, N and this salt: under it, another
    # configuration than the M = 128 bucket's wins N = 6144 (N = 4096 is the instance's own).
    monkeypatch.setenv("KLS_FAKE_BY_N", "salt-10")
    spec = spec_of(config)
    monkeypatch.setattr(runner, "TuneOptions", functools.partial(TuneOptions, worker=FAKE_WORKER))
    code = main(["tune", str(spec.template), "-i", SK, "--config", str(config), "--apply"])
    assert code == 0
    result = read_results(project / ".kls" / "tune" / SK / "results.json")
    where = [(b.m_above, b.m_upto, b.n) for b in result.dispatch]
    assert where == [(0, 128, None), (0, 128, 6144), (128, 2048, None), (2048, None, None)]
    bucket, own = result.dispatch[0], result.dispatch[1]
    assert own.shapes == ["128x6144x4096"]
    assert (own.choice.unit, own.choice.vars) != (bucket.choice.unit, bucket.choice.vars)
    # The N's own configuration is the fastest there; the bucket's is the fastest over both N.
    assert own.choice.per_shape["128x6144x4096"] > bucket.choice.per_shape["128x6144x4096"]
    loaded = load_instances(config)
    assert not [f for f in loaded.findings if f.severity.name == "ERROR"]
    inst = loaded.instances[f"{SK}_m128_n6144"]
    assert inst.op == own.choice.op
    assert {k: inst.variables[k] for k in own.choice.vars} == own.choice.vars
    x, w, y = (inst.tensors[name] for name in ("X", "W", "Y"))
    assert x is not None and w is not None and y is not None
    assert (x.shape[0], w.shape[-1], y.shape) == (128, 6144, (128, 6144))
    text = config.read_text()
    assert "# dispatch of sm90_streamk_bf16 (kls tune --apply): M <= 128, N = 6144" in text
    assert f"[instances.{SK}_m128]" in text and f"[instances.{SK}_m128_n4096]" not in text


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_built_library_exports_the_entry_and_checks_the_scheduler_arguments(
    tmp_path: Path,
) -> None:
    """A real build (sm_90a): nm finds the exported entry; called through ctypes without a
    GPU, out-of-range scheduler arguments are refused before anything touches a device, and
    valid ones get past that check (to the SM count query, which needs a GPU)."""
    from kls.compile import CompileOptions, compile_instance

    spec = spec_of(TEMPLATES / "kls.toml")
    built = compile_instance(spec, CompileOptions(mode="build"))
    assert built.ok and built.artifact is not None, [f.message for f in built.findings]
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(built.artifact)], capture_output=True, text=True
    ).stdout
    assert re.search(rf"\bT {spec.kernel_name}$", symbols, re.M)
    # ctypes runs in a child process: a crash there is no crash of the test process.
    script = f"""
import ctypes, sys
fn = getattr(ctypes.CDLL({str(built.artifact)!r}), {spec.kernel_name!r})
fn.restype = ctypes.c_int
fn.argtypes = ([ctypes.c_void_p] * 3 + [ctypes.c_int] * 11
               + [ctypes.c_uint8, ctypes.c_int, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint8]
               + [ctypes.c_void_p] * 3)
size = ctypes.c_size_t(7)
sizes = [128, 4096, 4096, 1, 4096, 4096, 0, 4096, 0, 0, 0]
args = [int(a) for a in sys.argv[1:]]
print("rc", fn(None, None, None, *sizes, *args, ctypes.addressof(size), None, None), size.value)
"""

    def call(*args: int) -> str:
        run = subprocess.run(
            [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True
        )
        return run.stdout + run.stderr

    assert "rc -1 7" in call(1, 1, 4, 0, 0) and "decomposition 4" in call(1, 1, 4, 0, 0)
    assert "out of range" in call(1, 0, 0, 0, 0)
    assert "out of range" in call(1, 1, 0, 0, 3)
    valid = call(4, 2, 2, 1, 2)
    assert "out of range" not in valid
    assert "rc 0 " in valid or "no CUDA device" in valid  # (a GPU machine answers the query)
