"""Inductor's `cuda.cutlass_instantiation_level` in kls: the instance key and the tune table's
key draw ops from the larger lists; the quick SM90 generation at a level gives exactly the
ops of cutlass_library's full GenerateSM90 that any Inductor dtype can match; a winner from
such a list is applied with its level and renders."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kls.cutlass import ops
from kls.instances import load_instances
from kls.tune.apply import apply_winner, level_to_write
from kls.tune.candidates import compatible_ops, distinct, make_candidates
from kls.tune.space import TuneSpaceError, parse_space
from tests.upstream import needs_torch_source

# Its instances read torch 2.11's own templates from the torch source.
pytestmark = needs_torch_source

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
SM90 = "torch211_sm90_bf16_4096"
# A 128x32 tile: not in the level-0 list, in the level-2222 one.
SMALL_TILE = (
    "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x32x64_1x2x1_0_tnn_align8"
    "_warpspecialized_cooperative_epi_tma"
)


def _full_generator_names(level: str) -> set[str]:
    """The Universal GEMM ops of cutlass_library's whole GenerateSM90 at `level`."""
    from cutlass_library import generator, library, manifest

    args = argparse.Namespace(
        architectures="90a", cuda_version="13.0", instantiation_level=level, operations="all",
        build_dir="", curr_build_dir="", generator_target="", kernels="all",
        ignore_kernels="", exclude_kernels="", kernel_filter_file=None,
        selected_kernel_list=None, interface_dir=None, filter_by_cc=True,
        disable_full_archs_compilation=False, log_level="warning",
        disable_cutlass_package_imports=False,
    )  # fmt: skip
    m = manifest.Manifest(args)
    generator.GenerateSM90(m, args.cuda_version)
    kinds = (library.GemmKind.Universal, library.GemmKind.Universal3x)
    return {
        name
        for by_name in m.operations.get(library.OperationKind.Gemm, {}).values()
        for name, op_list in by_name.items()
        if op_list[0].gemm_kind in kinds
    }


def test_quick_generation_at_a_level_is_the_full_lists_real_ops() -> None:
    quick, full = set(ops.generated("sm90", "1111")), _full_generator_names("1111")
    assert quick <= full
    # What only the full generator lists: complex GEMMs, which no Inductor dtype matches.
    assert {n for n in full - quick if "_cf64_" not in n} == set()
    assert len(quick) > len(ops.op_names("sm90"))  # more than level 0


def test_tune_table_level_adds_small_tiles() -> None:
    spec = load_instances(TEMPLATES / "kls.toml").instances[SM90]
    level0 = {o.op for o in distinct(compatible_ops(spec))}
    wide = distinct(compatible_ops(spec, "2222"))
    assert SMALL_TILE not in level0
    assert SMALL_TILE in {o.op for o in wide}
    assert all(o.level == "2222" for o in wide)
    assert {o.tile.split()[0] for o in wide} >= {"64x64x64", "128x32x64", "128x64x64"}
    space = parse_space({"cutlass_instantiation_level": "2222", "ops": [SMALL_TILE]}, "here")
    cs = make_candidates(spec, space)
    [unit] = cs.units
    assert unit.spec(spec).instantiation_level == "2222"  # the build renders from that list


@pytest.mark.parametrize("value", ["22a2", "22222", "", True, 2.5])
def test_bad_level_in_the_tune_table(value: object) -> None:
    with pytest.raises(TuneSpaceError) as info:
        parse_space({"cutlass_instantiation_level": value}, "kls.toml: [instances.x.tune]")
    assert "cutlass_instantiation_level" in str(info.value)


def test_bad_level_on_an_instance_is_kt002_at_its_line(project: Path) -> None:
    config = project / "kls.toml"
    # (before the SM90 instance's `vars` line, whatever swizzle a tune last applied)
    text = re.sub(
        r"^(vars = \{ swizzle = \d+ \}  # the runtime)",
        r'cutlass_instantiation_level = "2x22"\n\1',
        config.read_text(),
        count=1,
        flags=re.M,
    )
    config.write_text(text)
    found = load_instances(config).findings
    [f] = [f for f in found if f.code == "KT002"]
    assert "up to four digits" in f.message
    assert text.splitlines()[f.range.start.line].startswith("cutlass_instantiation_level")


def test_a_winner_from_a_larger_list_is_applied_with_its_level_and_renders(
    project: Path,
) -> None:
    config = project / "kls.toml"
    original = load_instances(config).instances[SM90].op
    assert original is not None
    tables = config.read_text().count("cutlass_instantiation_level =")  # the tune tables'
    note = apply_winner(config, SM90, SMALL_TILE, {"swizzle": 2}, "2222")
    assert "cutlass_instantiation_level 0 -> 2222" in note
    spec = load_instances(config).instances[SM90]
    assert (spec.op, spec.instantiation_level) == (SMALL_TILE, "2222")
    kls = str(Path(sys.executable).parent / "kls")
    cli = [kls, "render", str(spec.template), "-i", SM90, "--config", str(config)]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "cute::Shape<cute::_128, cute::_32, cute::_64>" in done.stdout
    # Applying a level-0 winner again takes the key away: the op is in the default list.
    apply_winner(config, SM90, original, {}, "0")
    spec = load_instances(config).instances[SM90]
    assert (spec.op, spec.instantiation_level) == (original, "0")
    assert config.read_text().count("cutlass_instantiation_level =") == tables


def test_a_winner_in_the_instances_own_list_keeps_its_level() -> None:
    """A tune at level "2222" whose winner level "0" lists too writes no level: the instance's
    op list stays the small, quick one."""
    spec = load_instances(TEMPLATES / "kls.toml").instances[SM90]
    assert spec.op is not None and spec.instantiation_level == "0"
    assert level_to_write(spec.op, "2222", "0", spec.arch) == "0"
    assert level_to_write(SMALL_TILE, "2222", "0", spec.arch) == "2222"


def test_an_op_of_a_larger_list_named_without_its_level_says_which_list(project: Path) -> None:
    ops.op_names("sm90", "2222")  # the list is on disk after a tune at that level
    with pytest.raises(ops.OpLookupError) as info:
        ops.resolve_op_name(SMALL_TILE, (), "90a")
    assert 'cutlass_instantiation_level = "2222"' in str(info.value)
    assert ops.resolve_op_name(SMALL_TILE, (), "90a", "2222") == SMALL_TILE


def test_a_bad_tune_table_is_a_finding_at_its_line_and_the_instance_stays(
    project: Path,
) -> None:
    config = project / "kls.toml"
    text = config.read_text().replace(
        'cutlass_instantiation_level = "2222"', 'cutlass_instantiation_level = "22x2"', 1
    )
    config.write_text(text)
    loaded = load_instances(config)
    assert SM90 in loaded.instances  # render, check and bench do not read the tune table
    [f] = [f for f in loaded.findings if f.code == "KT002"]
    assert "tune table" in f.message and "up to four digits" in f.message
    assert text.splitlines()[f.range.start.line] == 'cutlass_instantiation_level = "22x2"'

    kls = str(Path(sys.executable).parent / "kls")
    done = subprocess.run(
        [kls, "check", str(project / "kls.toml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "KT002" in done.stdout + done.stderr
