// The server's command line and the settings it is given, from the user's configuration.

export interface ServerCommand {
  command: string;
  args: string[];
}

export function serverCommand(interpreter: string, extraArgs: string[] = []): ServerCommand {
  return { command: interpreter, args: ["-m", "kls.cli", "serve", ...extraArgs] };
}

export interface KlsSettings {
  instancesFile?: string;
  activeInstance?: string;
  nvccPath?: string;
  clangPath?: string;
  arch?: string;
  cutlassInclude?: string;
  compileOnSave?: boolean;
  extraRoots?: string[];
  renderTimeout?: number;
  renderMemoryMB?: number;
  torchSource?: string;
  torchPython?: string;
  /** Not a user setting: whether VS Code trusts the workspace (the server then reads kls.toml's [torch] source). */
  workspaceTrusted?: boolean;
}

const SERVER_KEYS: (keyof KlsSettings)[] = [
  "instancesFile",
  "activeInstance",
  "nvccPath",
  "clangPath",
  "arch",
  "cutlassInclude",
  "compileOnSave",
  "extraRoots",
  "renderTimeout",
  "renderMemoryMB",
  "torchSource",
  "torchPython",
];

/** The render sandbox's defaults (kls.sandbox.workers): an untrusted workspace cannot raise them. */
export const DEFAULT_RENDER_TIMEOUT_S = 5;
export const DEFAULT_RENDER_MEMORY_MB = 1024;

/**
 * What the server sees through workspace/configuration. In an untrusted workspace nothing
 * that runs tools from the workspace is enabled: no compile on save, no custom nvcc/clang/CUTLASS,
 * templates are read from the project alone (no extra roots), and the render's time and
 * memory can be lowered but never raised above the defaults.
 */
export function effectiveSettings(raw: Record<string, unknown>, trusted: boolean): KlsSettings {
  const out: Record<string, unknown> = {};
  for (const key of SERVER_KEYS) {
    const value = raw[key];
    if (value !== undefined && value !== "") {
      out[key] = value;
    }
  }
  if (!trusted) {
    out.compileOnSave = false;
    delete out.nvccPath;
    delete out.clangPath;
    delete out.cutlassInclude;
    delete out.extraRoots;
    delete out.instancesFile; // a kls.toml anywhere would make its folder the project root
    delete out.torchSource; // the workspace may not point kls at other files to read
    delete out.torchPython; // nor name a program to run
    if (!atMost(out.renderTimeout, DEFAULT_RENDER_TIMEOUT_S)) {
      delete out.renderTimeout;
    }
    if (!atMost(out.renderMemoryMB, DEFAULT_RENDER_MEMORY_MB)) {
      delete out.renderMemoryMB;
    }
  }
  out.workspaceTrusted = trusted;
  return out as KlsSettings;
}

function atMost(value: unknown, limit: number): boolean {
  return typeof value === "number" && Number.isFinite(value) && value <= limit;
}

/** Commands that run nvcc or the GPU: refused in untrusted workspaces. */
export const TRUST_REQUIRED = new Set(["kls.compile", "kls.benchmark", "kls.tune"]);

export function untrustedMessage(command: string): string {
  return `${command} is off in an untrusted workspace: it runs nvcc (and the GPU) on files from this workspace. Trust the workspace to enable it.`;
}
