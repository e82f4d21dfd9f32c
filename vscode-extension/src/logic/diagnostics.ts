// One source of diagnostics. kls serve publishes every finding (kls, nvcc, kls-bench) with
// textDocument/publishDiagnostics and also answers textDocument/diagnostic (pull). A
// vscode-languageclient that sees the server's diagnosticProvider pulls as well, into a second
// collection, so VS Code showed each finding twice ("4 errors" for kls check's 2). kls serve now
// offers pull only to a client that asks (initializationOptions.pullDiagnostics); this client
// takes pushes only either way: it neither advertises pull support nor registers the provider.
// Pure over plain objects (the StaticFeature shape), so it is tested without VS Code.

import type { ClientCapabilities, ServerCapabilities } from "vscode-languageserver-protocol";

export class PushDiagnosticsOnly {
  /** Runs after the built-in features fill theirs: withdraw pull support from initialize. */
  fillClientCapabilities(capabilities: ClientCapabilities): void {
    delete capabilities.textDocument?.diagnostic;
    delete capabilities.workspace?.diagnostics;
  }

  /** Runs before any feature initializes: the pull feature then finds nothing to register. */
  preInitialize(capabilities: ServerCapabilities): void {
    delete capabilities.diagnosticProvider;
  }

  initialize(): void {}

  getState(): { kind: "static" } {
    return { kind: "static" };
  }

  clear(): void {}
}
