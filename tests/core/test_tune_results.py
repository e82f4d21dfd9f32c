"""results.json has one owner: `TuneResult.to_json()` writes it, `TuneResult.from_json()` reads
it back (resume, the kept winner, the editor), with a format version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kls.tune.results import (
    FORMAT_VERSION,
    PREVIOUS,
    Baseline,
    BuildRecord,
    Choice,
    Measurement,
    ResultsFileError,
    ShapeBest,
    TuneResult,
    keep_previous_winner,
    read_results,
)
from kls.tune.resume import load_prior


def a_result() -> TuneResult:
    """A small finished tune: two builds, a measurement per stage, a bar, a winner."""
    return TuneResult(
        instance="i",
        template="t.cu.jinja",
        config="kls.toml",
        executor="local",
        timestamp=1700000000.5,
        shapes=["128x64x32"],
        candidates=4,
        runtime_combos=[{"swizzle": 1}, {"swizzle": 8}],
        builds=[
            BuildRecord("u0", "op_a", "conf_a", "sm90", "128x128x64", {"x": 1}, ok=True),
            BuildRecord("u1", "op_b", "conf_b", "sm90", "64x64x64", {}, ok=False, error="boom"),
        ],
        measurements=[
            Measurement("u0", {"swizzle": 1}, "128x64x32", 1, True, 0.01, 0.002, 20, 3.5),
            Measurement("u0", {"swizzle": 8}, "128x64x32", 2, True, 0.009, 0.001, 200, 3.9),
        ],
        baselines=[Baseline("128x64x32", True, 0.012, [0.012, 0.013], 0.01, "cublas")],
        best=[ShapeBest("128x64x32", "u0", "op_a", {"swizzle": 8}, 0.009, 0.001, 3.9, 0.012, 1.3)],
        winner=Choice("u0", "op_a", {"swizzle": 8}, 1.3, {"128x64x32": 1.3}),
        current=Choice("u1", "op_b", {"swizzle": 1}, None, {}),
        device={"name": "NVIDIA H200"},
        method={"stage1": {"samples": 20}},
        notes=["a note"],
        source_hash="abc",
    )


def written(result: TuneResult) -> dict[str, object]:
    """What results.json holds: to_json() through JSON text."""
    data: dict[str, object] = json.loads(json.dumps(result.to_json()))
    return data


def test_round_trip() -> None:
    result = a_result()
    data = written(result)
    assert data["format_version"] == FORMAT_VERSION
    assert TuneResult.from_json(data) == result


def test_a_file_from_before_the_version_still_reads() -> None:
    data = written(a_result())
    del data["format_version"]
    data["a key no kls wrote"] = 1
    assert TuneResult.from_json(data) == a_result()


def test_a_file_of_a_newer_version_is_refused_in_words(tmp_path: Path) -> None:
    data = written(a_result())
    data["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(ResultsFileError, match="newer kls") as caught:
        TuneResult.from_json(data)
    assert "upgrade kls, or tune again" in str(caught.value)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    prior, note = load_prior(path, a_result(), {"name": "NVIDIA H200"})
    assert prior is None and "newer kls" in note and str(path) in note
    keep_previous_winner(TuneResult("i", "t", "c", "local", 0.0, []), tmp_path)
    assert path.is_file() and not (tmp_path / PREVIOUS).exists()  # left as it is


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[1, 2]", "not a JSON object"),
        ('{"instance": "i"}', "lacks template, config, executor, timestamp, shapes"),
        ('{"format_version": "one"}', "not a version number"),
        ("{not json", "is not JSON"),
    ],
)
def test_what_is_not_tune_results_says_why(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(ResultsFileError, match=words):
        read_results(path)


def test_a_bad_record_names_where_it_is() -> None:
    data = written(a_result())
    data["builds"] = [{"unit": "u0"}]
    with pytest.raises(ResultsFileError, match=r"builds\[0\] lacks op"):
        TuneResult.from_json(data)


def test_resume_reuses_what_succeeded(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(a_result().to_json()))
    prior, note = load_prior(path, a_result(), {"name": "NVIDIA H200"})
    assert prior is not None and note == ""
    assert prior.built == {"u0"} and len(prior.measurements) == 2
    assert set(prior.baselines) == {("128x64x32", 2)}
    _, other = load_prior(path, a_result(), {"name": "NVIDIA A100"})
    assert "it ran on NVIDIA H200" in other


def test_the_editor_reads_it_through_the_same_class(tmp_path: Path) -> None:
    from kls.lsp.tune import TuneView
    from kls.lsp.tune import read_results as editor_reads

    path = tmp_path / "results.json"
    path.write_text(json.dumps(a_result().to_json()))
    seen = editor_reads(path)
    assert seen == a_result()
    assert TuneView(seen).winner_op() == "op_a"
    data = written(a_result())
    data["format_version"] = FORMAT_VERSION + 1
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(data))
    assert editor_reads(newer) is None  # a newer kls's file: nothing shown, no traceback
