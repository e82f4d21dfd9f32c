// Which Python runs the server: the kls setting, else the Python extension's active
// interpreter, else python3. Pure logic, testable without VS Code.

export interface InterpreterChoice {
  path: string;
  source: "setting" | "python-extension" | "default";
}

export function chooseInterpreter(
  setting: string | undefined,
  pythonExtensionActive: string | undefined,
  fallback = "python3",
): InterpreterChoice {
  const configured = (setting ?? "").trim();
  if (configured) {
    return { path: expandHome(configured), source: "setting" };
  }
  const active = (pythonExtensionActive ?? "").trim();
  if (active) {
    return { path: active, source: "python-extension" };
  }
  return { path: fallback, source: "default" };
}

export function expandHome(path: string, home = process.env.HOME ?? ""): string {
  return path.startsWith("~/") && home ? home + path.slice(1) : path;
}

/** The command that tells whether kls is importable in an interpreter. */
export function importCheckArgs(): string[] {
  return ["-c", "import kls.cli, sys; sys.stdout.write(kls.__version__)"];
}

/** pip arguments that install kls into the interpreter. */
export function installArgs(source: string): string[] {
  return ["-m", "pip", "install", "--upgrade", source.trim() || "kls"];
}
