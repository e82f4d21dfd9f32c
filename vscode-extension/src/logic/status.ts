// The status bar item: active instance, server state, running jobs.
import type { BenchmarkAnswer, CompileAnswer, TuneAnswer } from "./protocol";

export type ServerState = "starting" | "running" | "stopped" | "missing";

export interface StatusInput {
  instance?: string;
  state: ServerState;
  jobs: string[]; // titles of running compile/benchmark jobs
}

export function statusText(input: StatusInput): string {
  if (input.state === "missing") {
    return "$(warning) kls: not installed";
  }
  if (input.state === "stopped") {
    return "$(debug-stop) kls: stopped";
  }
  if (input.state === "starting") {
    return "$(sync~spin) kls: starting";
  }
  const instance = input.instance ?? "no instance";
  if (input.jobs.length > 0) {
    return `$(sync~spin) kls: ${instance} · ${input.jobs[0]}${input.jobs.length > 1 ? ` (+${input.jobs.length - 1})` : ""}`;
  }
  return `$(circuit-board) kls: ${instance}`;
}

export function statusTooltip(input: StatusInput): string {
  const lines = [`kls language server: ${input.state}`];
  lines.push(input.instance ? `Active instance: ${input.instance} (click to change)` : "No instance: declare one in kls.toml");
  for (const job of input.jobs) {
    lines.push(`Running: ${job} (click to cancel)`);
  }
  return lines.join("\n");
}

/** One line for the status bar when a compile, benchmark or tune job ends. */
export function jobSummary(
  result: Partial<CompileAnswer & BenchmarkAnswer & TuneAnswer> | null | undefined,
): string {
  if (!result) {
    return "no answer";
  }
  if (result.cancelled === true) {
    return "cancelled";
  }
  if (typeof result.headline === "string") {
    return result.headline;
  }
  if (typeof result.error === "string") {
    return result.error;
  }
  if (result.ok === true) {
    return typeof result.seconds === "number" ? `ok (${result.seconds} s)` : "ok";
  }
  return typeof result.errors === "number" ? `failed, ${result.errors} error(s)` : "failed";
}
