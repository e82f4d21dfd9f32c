import { strict as assert } from "assert";

import { PushDiagnosticsOnly } from "../../src/logic/diagnostics";

describe("push diagnostics only", () => {
  it("withdraws the client's pull capability and keeps the rest", () => {
    const caps = {
      textDocument: { diagnostic: { dynamicRegistration: true }, hover: {} },
      workspace: { diagnostics: { refreshSupport: true }, configuration: true },
    };
    new PushDiagnosticsOnly().fillClientCapabilities(caps);
    assert.deepEqual(caps, { textDocument: { hover: {} }, workspace: { configuration: true } });
  });
  it("hides the server's diagnosticProvider from the pull feature", () => {
    const server = {
      diagnosticProvider: { identifier: "kls", interFileDependencies: true, workspaceDiagnostics: false },
      hoverProvider: true,
    };
    new PushDiagnosticsOnly().preInitialize(server);
    assert.deepEqual(server, { hoverProvider: true });
  });
  it("copes with capabilities that lack the sections", () => {
    const feature = new PushDiagnosticsOnly();
    feature.fillClientCapabilities({});
    feature.preInitialize({});
    assert.deepEqual(feature.getState(), { kind: "static" });
  });
});
