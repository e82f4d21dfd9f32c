"""The per-shape dispatch keyed on N as well as M (`dispatch = "mn"`): which buckets a tune
judges, what `--apply` writes for them, and results format 3 (a bucket's `n`). Plain data and
a kls.toml in a temporary folder: no torch, nvcc or GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kls.instances.tune_table import TuneSpaceError, parse_space
from kls.tune.apply import Bucket, apply_dispatch, stale_dispatch
from kls.tune.dispatch import (
    N_MARGIN,
    bucket_choices,
    bucket_instance,
    bucket_text,
    buckets_to_write,
)
from kls.tune.results import FORMAT_VERSION, BucketChoice, Choice, TuneResult, read_results

# The M = 128 shapes of the stream-K suite, and one at 2048.
SQUARE, WIDE, DEEP, LARGE = "128x4096x4096", "128x14336x4096", "128x4096x14336", "2048x4096x4096"
KEYS = [SQUARE, WIDE, DEEP, LARGE]


def _choice(unit: str, ratios: dict[str, float], swizzle: int = 1) -> Choice:
    return Choice(unit, f"op_{unit}", {"swizzle": swizzle}, None, ratios)


# "narrow" wins N = 4096 (both K), "wide" wins N = 14336; "narrow" has the better geometric
# mean over the whole M = 128 bucket; "big" wins M = 2048.
CHOICES = [
    _choice("narrow", {SQUARE: 1.10, DEEP: 1.00, WIDE: 0.80, LARGE: 0.90}),
    _choice("wide", {SQUARE: 0.70, DEEP: 0.80, WIDE: 1.05, LARGE: 0.95}),
    _choice("big", {SQUARE: 0.60, DEEP: 0.60, WIDE: 0.60, LARGE: 1.02}),
]


def _where(buckets: list[BucketChoice]) -> list[tuple[int, int | None, int | None, str]]:
    return [(b.m_above, b.m_upto, b.n, b.choice.unit) for b in buckets]


def test_by_n_adds_an_n_only_where_another_configuration_wins_it() -> None:
    by_m = bucket_choices(CHOICES, KEYS)
    assert _where(by_m) == [(0, 128, None, "narrow"), (128, None, None, "big")]
    by_mn = bucket_choices(CHOICES, KEYS, by_n=True)
    assert _where(by_mn) == [
        (0, 128, None, "narrow"),
        (0, 128, 14336, "wide"),  # N = 4096's best is the bucket's own: no instance of its own
        (128, None, None, "big"),
    ]
    wide = by_mn[1]
    assert wide.shapes == [WIDE] and wide.choice.per_shape == {WIDE: 1.05}
    assert wide.choice.geomean_vs_cublas == pytest.approx(1.05)
    assert bucket_text(wide) == "M <= 128, N = 14336"
    assert bucket_instance("sk", wide) == "sk_m128_n14336"
    assert bucket_instance("sk", by_mn[0]) == "sk_m128"


def test_one_m_dispatches_on_n_alone_and_a_runtime_setting_counts_as_another_configuration() -> (
    None
):
    keys = [SQUARE, WIDE]
    assert bucket_choices(CHOICES, keys) == []  # one M: nothing for "m" to dispatch on
    same_op = [
        _choice("narrow", {SQUARE: 1.2, WIDE: 0.9}, swizzle=1),
        _choice("narrow", {SQUARE: 1.0, WIDE: 1.0}, swizzle=4),
    ]
    got = bucket_choices(same_op, keys, by_n=True)
    assert [(b.n, b.choice.vars) for b in got] == [(None, {"swizzle": 1}), (14336, {"swizzle": 4})]
    assert bucket_text(got[0]) == "any M" and bucket_text(got[1]) == "any M, N = 14336"
    # The bucket of every M and N is the winner, which --apply writes into the instance itself.
    assert buckets_to_write(got) == [got[1]]
    assert buckets_to_write(bucket_choices(CHOICES, KEYS, by_n=True)) == bucket_choices(
        CHOICES, KEYS, by_n=True
    )


def test_a_bucket_without_a_configuration_verified_everywhere_keeps_its_verified_ns() -> None:
    unverified = [_choice("narrow", {SQUARE: 1.1, DEEP: 1.0, LARGE: 1.0})]  # nothing at WIDE
    assert _where(bucket_choices(unverified, KEYS)) == [(128, None, None, "narrow")]
    got = bucket_choices(unverified, KEYS, by_n=True)
    assert _where(got) == [(0, 128, 4096, "narrow"), (128, None, None, "narrow")]


@pytest.mark.parametrize(("faster", "own"), [(1.0, False), (1.02, False), (1.03, True)])
def test_an_n_gets_its_own_instance_only_past_the_margin(faster: float, own: bool) -> None:
    """Ties and wins inside N_MARGIN (2 %) leave the N to its bucket's configuration."""
    assert N_MARGIN == 0.02
    keys = [SQUARE, WIDE]
    choices = [
        _choice("bucket", {SQUARE: 1.2, WIDE: 1.0}),
        _choice("other", {SQUARE: 0.5, WIDE: faster}),
    ]
    got = bucket_choices(choices, keys, by_n=True)
    assert [b.n for b in got] == ([None, 14336] if own else [None])


def test_apply_writes_the_n_instance_with_its_m_and_n(tmp_path: Path) -> None:
    config = tmp_path / "kls.toml"
    config.write_text(
        "# the project's own comment\n"
        "[instances.sk]\n"
        'template = "gemm.cu.jinja"\n'
        'op = "op_old"\n'
        "vars = { swizzle = 1 }\n"
        'tensors.X = { shape = [4096, 4096], dtype = "bf16", layout = "row" }\n'
        'tensors.W = { shape = [4096, 4096], dtype = "bf16", layout = "col" }\n'
        'tensors.Bias = "none"\n'
        'tensors.Y = { shape = [4096, 4096], dtype = "bf16", layout = "row" }\n'
        "\n[instances.sk.tune]\n"
        'dispatch = "mn"\n'
    )
    buckets = [
        Bucket("sk_m128", "M <= 128", 128, "op_narrow", {"swizzle": 1}, "0"),
        Bucket("sk_m128_n14336", "M <= 128, N = 14336", 128, "op_wide", {"swizzle": 4}, "0", 14336),
    ]
    lines = apply_dispatch(config, "sk", buckets)
    assert len(lines) == 2 and all(line.endswith(", new)") for line in lines), lines
    text = config.read_text()
    assert "# the project's own comment" in text
    assert "# dispatch of sk (kls tune --apply): M <= 128, N = 14336" in text
    written = tomllib.loads(text)["instances"]
    wide = written["sk_m128_n14336"]
    assert wide["op"] == "op_wide" and wide["vars"] == {"swizzle": 4} and "tune" not in wide
    shapes = {name: t.get("shape") for name, t in wide["tensors"].items() if isinstance(t, dict)}
    assert shapes == {"X": [128, 4096], "W": [4096, 14336], "Y": [128, 14336]}
    assert wide["tensors"]["Bias"] == "none"
    assert written["sk_m128_n14336"]["tensors"]["Y"].get("stride") is None  # layout = "row"
    m_only = written["sk_m128"]["tensors"]
    assert (m_only["W"]["shape"], m_only["Y"]["shape"]) == ([4096, 4096], [128, 4096])
    # A later tune where N = 14336 no longer wins on its own: its instance is named, not lost.
    again = apply_dispatch(config, "sk", buckets[:1])
    assert len(again) == 2 and "no longer part of the dispatch" in again[1], again
    assert "[instances.sk_m128_n14336]" in again[1]
    assert tomllib.loads(config.read_text())["instances"]["sk_m128_n14336"]["op"] == "op_wide"
    # A tune that writes no dispatch at all names both instances an earlier one left.
    left = stale_dispatch(config, "sk")
    assert len(left) == 2, left
    assert "[instances.sk_m128]" in left[0] and "[instances.sk_m128_n14336]" in left[1], left


def test_results_format_3_keeps_a_buckets_n_and_format_2_reads_as_every_n(tmp_path: Path) -> None:
    result = TuneResult("i", "t", "c", "local", 0.0, [SQUARE, WIDE])
    choice = Choice("u", "op", {"swizzle": 4}, 1.05, {WIDE: 1.05})
    result.dispatch = [BucketChoice(0, None, [WIDE], choice, 14336)]
    data = result.to_json()
    assert data["format_version"] == FORMAT_VERSION == 3
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    assert read_results(path).dispatch[0].n == 14336
    older = dict(data, format_version=2)
    older["dispatch"] = [{k: v for k, v in data["dispatch"][0].items() if k != "n"}]
    path.write_text(json.dumps(older))
    assert read_results(path).dispatch[0].n is None


@pytest.mark.parametrize(
    ("dispatch", "shapes", "error"),
    [
        ("mn", [[128, 4096, 4096], [128, 14336, 4096]], None),
        ("m", [[128, 4096, 4096], [128, 14336, 4096]], "at least two M values"),
        ("mn", [[128, 4096, 4096], [128, 4096, 14336]], "at least two M or two N values"),
        ("n", [[128, 4096, 4096], [2048, 4096, 4096]], 'use "m"'),
    ],
)
def test_the_tune_table_says_which_dispatch_its_shapes_allow(
    dispatch: str, shapes: list[list[int]], error: str | None
) -> None:
    raw = {"dispatch": dispatch, "shapes": shapes}
    if error is None:
        assert parse_space(raw, "t").dispatch == dispatch
    else:
        with pytest.raises(TuneSpaceError, match=error):
            parse_space(raw, "t")


def test_an_explicit_stride_follows_the_buckets_shape(tmp_path: Path) -> None:
    """Strides written in kls.toml are made again for the new M and N, in the same order, as
    the tune's own tensors at that shape were: row-major stays row-major, column-major stays
    column-major, a broadcast Bias row stays one."""
    config = tmp_path / "kls.toml"
    config.write_text(
        "[instances.sk]\n"
        'template = "gemm.cu.jinja"\n'
        'op = "op_old"\n'
        'tensors.X = { shape = [4096, 4096], dtype = "bf16", stride = [4096, 1] }\n'
        'tensors.W = { shape = [4096, 4096], dtype = "bf16", stride = [1, 4096] }\n'
        'tensors.Bias = { shape = [4096, 4096], dtype = "bf16", stride = [0, 1] }\n'
        'tensors.Y = { shape = [4096, 4096], dtype = "bf16", stride = [4096, 1] }\n'
    )
    wide = Bucket("sk_m128_n14336", "M <= 128, N = 14336", 128, "op_wide", {}, "0", 14336)
    apply_dispatch(config, "sk", [wide])
    tensors = tomllib.loads(config.read_text())["instances"]["sk_m128_n14336"]["tensors"]
    got = {name: (t["shape"], t["stride"]) for name, t in tensors.items()}
    assert got == {
        "X": ([128, 4096], [4096, 1]),
        "W": ([4096, 14336], [1, 4096]),
        "Bias": ([128, 14336], [0, 1]),
        "Y": ([128, 14336], [14336, 1]),
    }
