// The PTX / SASS view of a Triton template's compiled instance (the server's `kls.assembly`).
// Its documents are the client's own: kls-asm:<template path>.<ptx|sass>?instance=<name>,
// their text the server's last answer.

import type { AssemblyKind } from "./protocol";

export const ASSEMBLY_SCHEME = "kls-asm";
export const ASSEMBLY_KINDS: AssemblyKind[] = ["ptx", "sass"];

export function assemblyUriString(templatePath: string, kind: AssemblyKind, instance?: string): string {
  const query = instance ? `?instance=${encodeURIComponent(instance)}` : "";
  return `${ASSEMBLY_SCHEME}:${encodeURI(templatePath)}.${kind}${query}`;
}

/** The listing lines of one source line as runs of consecutive lines, [first, last], in order:
 * one selection each. */
export function lineRuns(lines: number[]): Array<[number, number]> {
  const sorted = [...new Set(lines)].filter((n) => Number.isInteger(n) && n >= 0).sort((a, b) => a - b);
  const runs: Array<[number, number]> = [];
  for (const line of sorted) {
    const last = runs[runs.length - 1];
    if (last && line === last[1] + 1) {
      last[1] = line;
    } else {
      runs.push([line, line]);
    }
  }
  return runs;
}

/** What to tell the user when the line has no instructions of its own. */
export function noInstructionsMessage(kind: AssemblyKind, line: number): string {
  return (
    `kls: line ${line + 1} has no ${kind.toUpperCase()} instructions of its own ` +
    "(Triton's line info gives them to the lines they were merged with); the listing is open beside."
  );
}
