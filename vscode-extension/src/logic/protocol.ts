// What kls adds to LSP: its request and command names and the shape of every answer.
// Mirrors server/kls/lsp/protocol.py; tests/lsp/test_contracts.py keeps the two in step.

export const PREVIEW_REQUEST = "kls/preview";
export const PREVIEW_COMMAND = "kls.preview";
export const SELECT_INSTANCE_COMMAND = "kls.selectInstance";
export const COMPILE_COMMAND = "kls.compile";
export const CANCEL_COMMAND = "kls.cancel";
export const BENCHMARK_COMMAND = "kls.benchmark";
export const TUNE_COMMAND = "kls.tune";
export const ASSEMBLY_COMMAND = "kls.assembly";

export type CompileMode = "check" | "build";
export type DiagnosticSource = "kls" | "clang" | "nvcc" | "kls-bench" | "kls-tune";
export type JobKind = "compile" | "bench" | "tune";
export type AssemblyKind = "ptx" | "sass";
/** A profile name: the server's registry decides which exist (`kls rules --profile`, `kls info`). */
export type Profile = string;
export type InstanceKind = "cutlass_gemm" | "cuda" | "triton";
export type Reference = "gemm" | "softmax" | "none";

/** `kls/preview` and `kls.preview`: the rendered CUDA of an instance, or why not. */
export interface PreviewAnswer {
  instance: string | null;
  text: string | null;
  error: string | null;
  uri: string | null;
}

/** `kls.selectInstance [uri, name?]`: the instances of a template and the active one. */
export interface SelectInstanceAnswer {
  ok: boolean;
  instances: string[];
  active?: string | null;
  error?: string;
}

/** `kls.compile [uri, mode?]`. */
export interface CompileAnswer {
  ok: boolean;
  instance?: string;
  error?: string;
  cancelled?: boolean;
  mode?: CompileMode;
  cached?: boolean;
  seconds?: number;
  errors?: number;
  artifact?: string | null;
  log?: string;
}

/** `kls.cancel [uri]`: the kinds of job that were running and were told to stop. */
export interface CancelAnswer {
  cancelled: JobKind[];
}

/** `kls.benchmark [uri]`. */
export interface BenchmarkAnswer {
  ok: boolean;
  instance?: string;
  error?: string;
  cancelled?: boolean;
  headline?: string;
  report?: Record<string, unknown>;
}

/** `kls.tune [uri]`: `build_only` when there was no GPU (the headline says so). */
export interface TuneAnswer {
  ok: boolean;
  instance?: string;
  error?: string;
  cancelled?: boolean;
  build_only?: boolean;
  headline?: string;
  winner?: string | null;
  margin?: number | null;
  results?: string;
}

/** `kls.assembly [uri, kind?, line?]`: the PTX or SASS of a Triton template's active instance;
 * `lines` are the listing lines (0-based) of the instructions of `line`. */
export interface AssemblyAnswer {
  ok: boolean;
  instance?: string;
  error?: string;
  kind?: AssemblyKind;
  uri?: string;
  text?: string;
  lines?: number[];
}
