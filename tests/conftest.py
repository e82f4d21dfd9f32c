"""Shared fixtures: write small templates and kls.toml files into a temporary workspace."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kls.checks.run import CheckResult, check_file
from kls.findings import Finding
from kls.instances import InstanceSet, load_instances

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"

GEMM_TENSORS = """\
tensors.X = { shape = [256, 128], dtype = "bf16", layout = "row" }
tensors.W = { shape = [128, 64], dtype = "bf16", layout = "col" }
tensors.Bias = "none"
tensors.Y = { shape = [256, 64], dtype = "bf16", layout = "row" }
"""


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    def config(self, body: str) -> InstanceSet:
        path = self.write("kls.toml", body)
        return load_instances(path)

    def instance(self, template: str, extra: str = "", tensors: str = GEMM_TENSORS) -> InstanceSet:
        """One instance 'i' of `template` (text) with GEMM-like tensors X, W, Bias=None, Y."""
        self.write("t.cu.jinja", template)
        return self.config(f'[instances.i]\ntemplate = "t.cu.jinja"\n{extra}\n{tensors}')

    def check(self, template: str, extra: str = "", tensors: str = GEMM_TENSORS) -> CheckResult:
        instances = self.instance(template, extra, tensors)
        assert not instances.findings, [f.format_line() for f in instances.findings]
        return check_file(self.root / "t.cu.jinja", instances=instances)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A private copy of the shipped templates and their kls.toml, free to edit."""
    dest = tmp_path / "templates"
    shutil.copytree(TEMPLATES, dest)
    return dest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The shipped templates and kls.toml copied as a project of their own (tmp/t), without
    the checkout's .kls results: what a tune writes and `--apply` edits stays in tmp."""
    shutil.copytree(TEMPLATES, tmp_path / "t", ignore=shutil.ignore_patterns(".kls"))
    return tmp_path / "t"


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def only(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, [f.format_line() for f in findings]
    return matching[0]


Span = tuple[int, int, int, int]


def span(f: Finding) -> Span:
    r = f.range
    return (r.start.line, r.start.column, r.end.line, r.end.column)


def find_span(text: str, needle: str, occurrence: int = 0) -> Span:
    """The (line, col, line, col) range of the n-th occurrence of `needle` in `text`."""
    text = textwrap.dedent(text)
    at = -1
    for _ in range(occurrence + 1):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at)
    col = at - (text.rfind("\n", 0, at) + 1)
    end = at + len(needle)
    end_line = text.count("\n", 0, end)
    end_col = end - (text.rfind("\n", 0, end) + 1)
    return (line, col, end_line, end_col)


Finder = Callable[[str, str], Span]


def gpu_available() -> tuple[bool, str]:
    """Whether an NVIDIA GPU and driver are usable here (cuInit through cuda-python)."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        return False, f"cuda-python is not importable: {exc}"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:
        return False, f"no NVIDIA driver: {exc}"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {err}"
    err, count = driver.cuDeviceGetCount()
    return (count > 0, "ok") if err == driver.CUresult.CUDA_SUCCESS else (False, str(err))


# Tests that took 1.4 s or more in a full run on the 2-core machine (pytest --durations), or
# 0.6 s or more in the quick loop itself, and
# every test that runs nvcc, a GPU or a real editor: `pytest -m "not slow"` is the quick loop
# (docs/DEVELOPING.md). A test that grows slow belongs here, with the run that showed it.
SLOW_TESTS = frozenset(
    {
        "tests/core/test_bench.py::test_kls_bench_without_gpu_is_a_message",
        "tests/core/test_cli.py::test_check_a_config_file_checks_its_instances",
        "tests/core/test_cli.py::test_check_reports_like_a_compiler_and_fails",
        "tests/core/test_cli.py::test_check_shipped_templates_is_clean",
        "tests/core/test_cli.py::test_missing_path_and_no_config",
        "tests/core/test_cli.py::test_render_prints_cuda",
        "tests/core/test_cli_consistency.py::test_cache_info_and_clear_cover_every_cache",
        "tests/core/test_cli_consistency.py::test_check_compile_prints_each_instance_as_it_finishes",
        "tests/core/test_cli_consistency.py::test_every_command_takes_the_one_json_flag",
        "tests/core/test_cli_consistency.py::test_help_describes_positionals_and_exit_codes",
        "tests/core/test_cli_consistency.py::test_instance_may_be_left_out_when_the_template_has_one",
        "tests/core/test_cli_consistency.py::test_instances_of_a_folder_lists_every_config_below_it",
        "tests/core/test_cli_consistency.py::test_kls_docs_prints_the_template_api_or_a_section",
        "tests/core/test_compile.py::test_build_plain_cuda_exports_the_entry",
        "tests/core/test_compile.py::test_built_library_answers_the_workspace_query_without_a_gpu",
        "tests/core/test_compile.py::test_cache_hit_and_cached_failure",
        "tests/core/test_compile.py::test_cancel_kills_nvcc_and_its_children",
        "tests/core/test_compile.py::test_check_sm90_cutlass_instance",
        "tests/core/test_compile.py::test_concurrent_compiles_of_one_key_run_nvcc_once",
        "tests/core/test_compile.py::test_library_without_the_entry_is_a_clear_message",
        "tests/core/test_compile.py::test_typo_lands_on_the_template_token",
        "tests/core/test_compile.py::test_wrong_tile_shape_in_instance_definition",
        "tests/core/test_compile.py::test_wrong_type_in_argument_sub_template_lands_on_its_line",
        "tests/core/test_compile_security.py::test_cancel_kills_the_group_and_caches_nothing",
        "tests/core/test_compile_security.py::test_cancel_request_kills_nvcc_and_caches_nothing",
        "tests/core/test_compile_security.py::test_ctrl_c_kills_the_real_nvcc_and_cicc",
        "tests/core/test_compile_security.py::test_ctrl_c_on_kls_compile_kills_nvcc_and_its_child",
        "tests/core/test_compile_security.py::test_exit_without_shutdown_during_a_compile_kills_nvcc",
        "tests/core/test_compile_security.py::test_real_nvcc_header_next_to_template_and_environment",
        "tests/core/test_compile_security.py::test_relative_nvcc_path_is_run_from_anywhere",
        "tests/core/test_compile_security.py::test_sigterm_on_kls_serve_kills_nvcc",
        "tests/core/test_compile_torch211.py::test_torch211_bias_instance_passes_an_nvcc_check",
        "tests/core/test_config_findings.py::test_an_info_note_about_kls_toml_keeps_exit_code_0",
        "tests/core/test_config_findings.py::test_check_dir_reads_every_kls_toml_below_it",
        "tests/core/test_config_findings.py::test_reorder_disagreement_fails_kls_check",
        "tests/core/test_config_findings.py::test_unknown_op_reaches_kls_check_json",
        "tests/core/test_config_findings.py::test_unknown_op_reaches_kls_check_text_and_exit_code",
        "tests/core/test_config_security.py::test_a_template_just_within_the_bounds_parses_in_about_a_second",
        "tests/core/test_config_security.py::test_cli_extra_root_reaches_render",
        "tests/core/test_config_security.py::test_kls_check_never_echoes_a_file_outside_the_project",
        "tests/core/test_import_layers.py::test_every_package_has_a_layer",
        "tests/core/test_new_user.py::test_check_compile_fails_on_the_bf16_only_type_error",
        "tests/core/test_new_user.py::test_init_compiles",
        "tests/core/test_new_user.py::test_init_triton_writes_a_template_of_kls_own_that_checks_clean",
        "tests/core/test_ops_cli.py::test_ops_json_says_why_each_other_op_is_refused",
        "tests/core/test_own_words.py::test_no_file_shares_a_run_with_inductor",
        "tests/core/test_parse_limits.py::test_a_slow_op_list_does_not_count_against_the_render_deadline",
        "tests/core/test_parse_limits.py::test_a_slow_parse_in_the_server_never_delays_another_document",
        "tests/core/test_parse_limits.py::test_kls_check_on_a_slow_parse_is_one_kt501_warning",
        "tests/core/test_python_templates.py::test_kls_check_on_the_python_file_and_its_config",
        "tests/core/test_python_templates.py::test_kls_check_prints_the_py_position",
        "tests/core/test_python_templates.py::test_language_server_in_a_python_file",
        "tests/core/test_python_templates.py::test_source_map_and_line_directives_name_py_lines",
        "tests/core/test_render.py::test_shipped_templates_check_clean",
        "tests/core/test_render_exact.py::test_generated_templates_render_exactly_like_jinja_and_map_honestly",
        "tests/core/test_render_limits.py::test_a_worker_that_dies_is_reported_and_replaced",
        "tests/core/test_render_limits.py::test_a_worker_that_ignores_its_deadline_is_killed",
        "tests/core/test_render_limits.py::test_bombs_in_the_editor_never_delay_another_document",
        "tests/core/test_render_limits.py::test_busy_workers_do_not_hold_up_other_renders",
        "tests/core/test_render_limits.py::test_kls_check_ends_a_loop_bomb_with_kt104",
        "tests/core/test_render_limits.py::test_loop_bomb_is_stopped_at_its_line_within_the_deadline",
        "tests/core/test_render_limits.py::test_memory_bomb_hits_the_address_space_limit",
        "tests/core/test_sandbox.py::test_escape_from_the_cli_runs_nothing",
        "tests/core/test_sandbox.py::test_walk_reaches_only_the_documented_api",
        "tests/core/test_sandbox.py::test_walk_would_find_the_old_escape",
        "tests/core/test_tune.py::test_a_crashing_kernel_is_recorded_and_the_tune_goes_on",
        "tests/core/test_tune.py::test_an_error_mid_tune_times_nothing_after_it",
        "tests/core/test_tune.py::test_candidates_follow_inductors_filter_and_drop_same_kernels",
        "tests/core/test_tune.py::test_limit_is_an_even_reproducible_spread",
        "tests/core/test_tune.py::test_no_gpu_stops_before_building",
        "tests/core/test_tune.py::test_resume_reuses_what_the_last_run_measured",
        "tests/core/test_tune.py::test_resume_takes_only_whole_bars_and_looks_past_failed_builds",
        "tests/core/test_tune_levels.py::test_a_bad_tune_table_is_a_finding_at_its_line_and_the_instance_stays",
        "tests/core/test_tune_levels.py::test_a_winner_from_a_larger_list_is_applied_with_its_level_and_renders",
        "tests/core/test_tune_levels.py::test_a_winner_in_the_instances_own_list_keeps_its_level",
        "tests/core/test_tune_levels.py::test_an_op_of_a_larger_list_named_without_its_level_says_which_list",
        "tests/core/test_tune_levels.py::test_quick_generation_at_a_level_is_the_full_lists_real_ops",
        "tests/core/test_tune_levels.py::test_tune_table_level_adds_small_tiles",
        "tests/e2e/test_compile.py::test_cancel_stops_the_command_and_kills_nvcc",
        "tests/e2e/test_compile.py::test_compile_command_reports_progress_and_result",
        "tests/e2e/test_compile.py::test_kls_cancel_command_stops_a_running_compile",
        "tests/e2e/test_compile.py::test_save_maps_nvcc_error_then_fix_clears",
        "tests/e2e/test_offload.py::test_a_large_parse_does_not_hold_up_another_document",
        "tests/e2e/test_protocol_abuse.py::test_exit_without_shutdown_exits_1",
        "tests/e2e/test_protocol_abuse.py::test_requests_after_shutdown_get_invalid_request_then_exit_0",
        "tests/e2e/test_robustness.py::test_thousands_of_random_edits_never_crash_the_server",
        "tests/e2e/test_settings_first.py::test_a_failed_configuration_request_is_lint_only_until_settings_arrive",
        "tests/e2e/test_settings_first.py::test_no_tool_runs_while_the_settings_are_outstanding",
        "tests/e2e/test_tcp.py::test_serve_over_tcp",
        "tests/lsp/test_cuda_syntax.py::test_incremental_parse_reports_what_a_fresh_parse_reports",
        "tests/lsp/test_documents.py::test_data_edits_then_code_edits_publish_what_a_fresh_check_does",
        "tests/lsp/test_render_shapes.py::test_a_data_edit_reuses_the_code_and_renders_like_jinja",
        "tests/lsp/test_render_shapes.py::test_a_data_edit_reuses_the_jinja_parse_and_models_like_a_fresh_parse",
        "tests/lsp/test_render_shapes.py::test_a_shape_seen_from_the_last_text_is_the_shape_lexed_afresh",
        "tests/lsp/test_tune_lsp.py::test_tune_command_publishes_winner_and_margin",
    }
)
SLOW_MARKERS = ("nvcc", "gpu", "editor", "vscode", "ray")


def _mark_slow(items: list[pytest.Item]) -> None:
    for item in items:
        base = item.nodeid.split("[")[0]
        if base in SLOW_TESTS or any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_slow(items)
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    ok, reason = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {reason}")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def torch_allowed_again() -> Iterator[None]:
    """A language server in the test process turns the torch worker off until its settings
    (kls.profiles.triton.client.allow_torch); the next test starts as the CLI does."""
    yield
    from kls.profiles.triton.client import allow_torch

    allow_torch(True)
