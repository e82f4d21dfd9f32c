"""The rule catalogue: stable codes, default severities, what each rule means.

Families: KT0xx instance config, KT1xx Jinja, KT2xx kernel signature and buffer names, KT3xx
helper calls, KT4xx the C contract, KT5xx rendered CUDA syntax, KT6xx nvcc, KT7xx benchmark;
Triton templates (the `triton` profile): KT80x-KT81x the template API, KT85x the rendered
module, KT86x Triton's compile.
"""

from __future__ import annotations

from dataclasses import dataclass

from kls.findings import Severity


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str


_E, _W = Severity.ERROR, Severity.WARNING
RULES: dict[str, Rule] = {
    r.code: r
    for r in (
        Rule(
            "KT001",
            "config-unreadable",
            _E,
            "kls.toml is not valid TOML, cannot be read, or is larger than 1 MiB",
        ),
        Rule("KT002", "config-type", _E, "a config value has the wrong type or value"),
        Rule("KT003", "config-unknown-key", _E, "a config key kls does not know"),
        Rule(
            "KT004",
            "config-missing-file",
            _E,
            "a template path in the config does not exist, or leaves the project root (the "
            "folder of kls.toml, symlinks resolved): move the file into the project or name its "
            "folder in kls.extraRoots / --extra-root; a `file.py::NAME` names no module-level "
            "string constant kls can read without running the file",
        ),
        Rule("KT005", "unknown-op", _E, "the CUTLASS op is unknown or does not fit the tensors"),
        Rule("KT006", "no-instances", _W, "the config declares no instances"),
        Rule(
            "KT007",
            "torch-source-missing",
            Severity.INFO,
            "instances read Inductor's own files (`torch:` references) and no torch source was "
            "found: they are skipped; point kls at one (KLS_TORCH_SOURCE, [torch] source, "
            "--torch-source, kls.torchSource)",
        ),
        Rule(
            "KT008",
            "torch-version",
            _W,
            "the torch source's version is not one the instance's profile mirrors: kls renders "
            "as that profile's release does, which may differ from the torch found",
        ),
        Rule("KT101", "jinja-syntax", _E, "Jinja syntax error"),
        Rule(
            "KT102", "undefined-name", _E, "a name the instance does not define (StrictUndefined)"
        ),
        Rule("KT103", "render-raised", _E, "rendering raised an exception"),
        Rule("KT104", "render-limit", _E, "rendering ran past the time or size bound"),
        Rule(
            "KT105",
            "unreadable-template",
            _E,
            "the template is not UTF-8, cannot be read, or is beyond kls's size bounds (1 MiB, "
            "10,000 lines, 64 KiB of Jinja code): save it as UTF-8 or split it",
        ),
        Rule(
            "KT106",
            "sandbox-refused",
            _E,
            "the template reached for something outside its profile's documented API",
        ),
        Rule(
            "KT800",
            "triton-static-only",
            Severity.INFO,
            "Triton templates: torch is not importable, so only the static checks ran (install "
            "torch 2.11 beside kls, or set KLS_TORCH_PYTHON)",
        ),
        Rule("KT801", "triton-tensors", _E, "a Triton instance's tensors are missing or wrong"),
        Rule(
            "KT802",
            "triton-unknown-buffer",
            _E,
            "size/stride/load_input name a buffer def_kernel did not declare (Inductor: KeyError)",
        ),
        Rule(
            "KT803",
            "triton-def-kernel-arity",
            _E,
            "def_kernel names a different number of inputs than the instance passes",
        ),
        Rule(
            "KT804",
            "triton-no-inductor-template",
            _E,
            "no Inductor Triton template has this text: name it with inductor_template",
        ),
        Rule(
            "KT805",
            "triton-helper-twice",
            _E,
            "a helper Inductor registers once (def_kernel; load_input per input) is called twice",
        ),
        Rule(
            "KT806",
            "triton-index-out-of-rank",
            _E,
            "size/stride index outside the tensor's rank (Inductor: IndexError)",
        ),
        Rule(
            "KT807",
            "triton-stride-unpack",
            _E,
            "stride(name) unpacked into a number of names other than the tensor's rank",
        ),
        Rule(
            "KT808",
            "triton-config-missing",
            _E,
            "a Jinja name the template reads is not in the instance's vars (nor a helper)",
        ),
        Rule(
            "KT809",
            "triton-config-value",
            _E,
            "a config value whose str() is not Python: Inductor prints it as `NAME : "
            "tl.constexpr = <str(value)>`, so a string must carry its own quotes",
        ),
        Rule(
            "KT810",
            "triton-indent",
            _W,
            "indent_width / indent_except_first(n) disagree with the column of the call's {{",
        ),
        Rule(
            "KT811",
            "triton-int32-index",
            _W,
            "a tensor spans more than 2**31-1 elements and the template computes offsets from "
            "an int32 tl.program_id (Inductor's int64 INDEX_DTYPE covers explicit tensors only)",
        ),
        Rule(
            "KT812",
            "triton-flex-mod",
            _E,
            "a flex instance's score_mod/mask_mod cannot be imported or is not a function",
        ),
        Rule(
            "KT813",
            "triton-output-layout",
            _W,
            "Inductor's lowering gives the output another layout than kls.toml declares",
        ),
        Rule(
            "KT814",
            "triton-flex-promise",
            _E,
            "a flex instance promises ROWS_GUARANTEED_SAFE or BLOCKS_ARE_CONTIGUOUS and its "
            "mask breaks the promise (the kernel would silently compute a wrong result)",
        ),
        Rule(
            "KT815",
            "triton-flex-promise-unchecked",
            _W,
            "a flex instance makes a promise kls cannot decide for its mask (a mask_mod that "
            "reads the batch or head index, one that cannot be traced or evaluated)",
        ),
        Rule(
            "KT816",
            "triton-config-overridden",
            _W,
            "Inductor's lowering made the kernel with another value of a config variable than "
            "kls.toml gives (flex's USE_TMA where TMA cannot be used)",
        ),
        Rule("KT851", "triton-module-syntax", _E, "the rendered Triton module is not valid Python"),
        Rule(
            "KT852",
            "triton-module-name",
            _E,
            "a @triton.jit function of the rendered module reads a name nothing defines",
        ),
        Rule(
            "KT860",
            "triton-resources",
            Severity.INFO,
            "Triton's compile for the instance's target: registers and shared memory used",
        ),
        Rule("KT861", "triton-compile", _E, "Triton's compile of the rendered module failed"),
        Rule(
            "KT862",
            "triton-out-of-resource",
            _E,
            "the kernel needs more shared memory than the device gives a block (out of resource "
            "at autotune time)",
        ),
        Rule("KT863", "triton-spill", _W, "the kernel spills registers to local memory"),
        Rule("KT201", "names-count", _E, "names_str count differs from inputs + outputs"),
        Rule("KT202", "reorder-length", _E, "input_reorder length differs from inputs"),
        Rule("KT203", "reorder-permutation", _E, "input_reorder is not a permutation"),
        Rule("KT204", "undeclared-buffer", _E, "a buffer used by a helper is not in def_kernel"),
        Rule("KT205", "unused-buffer", _W, "a buffer declared in def_kernel is never used"),
        Rule("KT206", "duplicate-buffer", _W, "a buffer is listed twice in def_kernel"),
        Rule("KT207", "invalid-c-name", _E, "a parameter name is not a C identifier"),
        Rule("KT208", "reserved-c-name", _E, "a parameter name collides with the C code's names"),
        Rule("KT209", "missing-def-kernel", _E, "the kernel template never calls def_kernel"),
        Rule("KT210", "def-kernel-twice", _E, "def_kernel is called more than once"),
        Rule("KT211", "before-def-kernel", _E, "a helper that needs def_kernel runs before it"),
        Rule("KT212", "not-a-buffer", _E, "def_kernel got something that is not a buffer"),
        Rule(
            "KT213",
            "names-swapped",
            _E,
            "a name in names_str is another buffer's name: the C parameter called that holds "
            "the data of the buffer at its position (names follow inputs + outputs in order)",
        ),
        Rule(
            "KT214",
            "reorder-not-passed",
            _E,
            "kls.toml sets input_reorder but the template's def_kernel is called without it "
            "(or with another list): the C parameters take the caller's buffers in the wrong order",
        ),
        Rule("KT301", "helper-arity", _E, "a helper is called with the wrong arguments"),
        Rule("KT302", "index-out-of-rank", _E, "a dimension index is outside the tensor's rank"),
        Rule("KT303", "missing-getvalue", _E, "header()/globals() used without .getvalue()"),
        Rule("KT305", "unknown-helper", _E, "kernel./template. has no such helper"),
        Rule(
            "KT306", "not-row-or-column", _E, "row_or_column_stride on a tensor with no unit stride"
        ),
        Rule(
            "KT307",
            "buffer-role",
            _E,
            "a helper that takes buffers by role (render_gemm_arguments' X, W, Bias, Y) got "
            "another buffer in a role's place",
        ),
        Rule("KT401", "no-exported-entry", _E, 'no PT_EXPORT function inside extern "C"'),
        Rule(
            "KT402", "workspace-query-order", _E, "null check or launch before the workspace query"
        ),
        Rule("KT403", "no-workspace-query", _W, "the entry never answers the workspace-size query"),
        Rule(
            "KT404",
            "globals-missing",
            _E,
            "the rendered code uses PT_EXPORT/CUTLASS_CHECK but never defines them: "
            "{{template.globals().getvalue()}} is missing",
        ),
        Rule("KT405", "doubled-pt-export", _W, "PT_EXPORT written twice before the entry"),
        Rule("KT501", "cuda-syntax", _E, "the rendered CUDA does not parse"),
        Rule("KT601", "nvcc-error", _E, "nvcc reported an error"),
        Rule("KT602", "nvcc-warning", _W, "nvcc reported a warning on a template line"),
        Rule("KT603", "nvcc-timeout", _E, "nvcc ran past the compile timeout"),
        Rule("KT604", "nvcc-missing", _E, "nvcc is missing or unusable"),
        Rule("KT605", "cutlass-missing", _E, "the CUTLASS headers are missing"),
        Rule(
            "KT606",
            "quick-check-error",
            _E,
            "the quick check (clang, host side) reported an error; nvcc's verdict replaces it",
        ),
        Rule("KT700", "benchmark", Severity.INFO, "the last benchmark of the active instance"),
        Rule("KT701", "benchmark-failed", _E, "the benchmark failed: wrong result, crash, ..."),
        Rule(
            "KT710",
            "tune",
            Severity.INFO,
            "the last tune of the active instance: its winner and margin over the current op",
        ),
        Rule(
            "KT720",
            "sanitizer-memcheck",
            _E,
            "compute-sanitizer's memcheck reported an access (out of bounds, misaligned, a "
            "hardware exception) at the template line that produced the load or store",
        ),
        Rule(
            "KT721",
            "sanitizer-racecheck",
            _E,
            "compute-sanitizer's racecheck reported a shared-memory race between two accesses",
        ),
        Rule(
            "KT722",
            "sanitizer-unavailable",
            _W,
            "compute-sanitizer is missing or refuses this machine's GPU: nothing was sanitized",
        ),
        Rule(
            "KT723",
            "sanitizer-run-failed",
            _E,
            "the run under compute-sanitizer failed (crash, wrong result, past its deadline) "
            "without a report that locates it",
        ),
    )
}


def rule(code: str) -> Rule:
    return RULES[code]


# The rule families only one profile's templates can raise (`kls rules --profile`).
PROFILE_FAMILIES: dict[str, tuple[str, ...]] = {"triton": ("KT80", "KT81", "KT85", "KT86")}


def profile_rules(name: str) -> list[Rule]:
    """The rules of the families that belong to profile `name` (none for most profiles)."""
    prefixes = PROFILE_FAMILIES.get(name, ())
    return [r for r in RULES.values() if r.code.startswith(prefixes)] if prefixes else []
