// Python files whose string constants are kls templates (`template = "gemm_template.py::NAME"`
// in kls.toml). The client hands kls exactly those files (plus the user's extra patterns), as
// document filters that keep the `python` language: the Python extension keeps the file, kls
// answers only inside the template strings.
import * as path from "path";

// A `file.py::CONSTANT` value of a template key, in TOML's basic or literal strings.
const TEMPLATE_REF = /(?:^|[\s{,.])(?:template|argument_template|epilogue_template)\s*=\s*["']([^"'\n]+?\.pyi?)::[A-Za-z_][A-Za-z0-9_]*["']/g;

/** The Python files a kls.toml (or a pyproject.toml's [tool.kls]) names, as absolute paths. */
export function pythonFilesNamed(configPath: string, configText: string): string[] {
  const folder = path.dirname(configPath);
  const found = new Set<string>();
  for (const match of configText.matchAll(TEMPLATE_REF)) {
    found.add(path.resolve(folder, match[1]));
  }
  return [...found].sort();
}

export interface PythonDocumentFilter {
  language: "python";
  scheme: "file";
  pattern: string;
}

/**
 * Document filters for the named files (an absolute path matches that file exactly) and the
 * user's extra glob patterns, each restricted to the python language.
 */
export function pythonDocumentFilters(files: string[], extraPatterns: string[]): PythonDocumentFilter[] {
  const patterns = [...new Set([...files, ...extraPatterns.filter((p) => p.trim() !== "")])];
  return patterns.map((pattern) => ({ language: "python", scheme: "file", pattern }));
}

/** Whether two lists of named files differ (the client restarts to take the new list). */
export function sameFiles(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((file, i) => file === b[i]);
}
