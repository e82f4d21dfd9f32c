import { strict as assert } from "assert";

import { TRUST_REQUIRED, effectiveSettings, serverCommand, untrustedMessage } from "../../src/logic/server";

describe("server command line and settings", () => {
  it("runs kls serve on the interpreter", () => {
    assert.deepEqual(serverCommand("/venv/bin/python"), {
      command: "/venv/bin/python",
      args: ["-m", "kls.cli", "serve"],
    });
  });
  it("passes the settings the server reads", () => {
    const raw = {
      instancesFile: "",
      activeInstance: "sm90_bf16_4096",
      nvccPath: "/usr/local/cuda/bin/nvcc",
      compileOnSave: true,
      "python.interpreterPath": "/x",
    };
    assert.deepEqual(effectiveSettings(raw, true), {
      activeInstance: "sm90_bf16_4096",
      nvccPath: "/usr/local/cuda/bin/nvcc",
      compileOnSave: true,
      workspaceTrusted: true,
    });
  });
  it("turns off compiling and custom tools in an untrusted workspace", () => {
    const raw = {
      compileOnSave: true,
      nvccPath: "./evil-nvcc",
      cutlassInclude: "./x",
      extraRoots: ["/etc"],
      instancesFile: "/elsewhere/kls.toml",
      torchSource: "/elsewhere/torch",
      torchPython: "./evil-python",
      renderTimeout: 2,
    };
    assert.equal(effectiveSettings(raw, true).torchPython, "./evil-python");
    assert.deepEqual(effectiveSettings(raw, false), {
      compileOnSave: false,
      renderTimeout: 2,
      workspaceTrusted: false,
    });
    assert.ok(TRUST_REQUIRED.has("kls.compile") && TRUST_REQUIRED.has("kls.benchmark"));
    assert.ok(TRUST_REQUIRED.has("kls.tune")); // builds every candidate with nvcc, times on the GPU
    assert.ok(!TRUST_REQUIRED.has("kls.preview"));
    assert.ok(!TRUST_REQUIRED.has("kls.build")); // no such server command: build is kls.compile [uri, "build"]
    assert.match(untrustedMessage("kls.compile"), /untrusted workspace/);
  });
  it("never lets an untrusted workspace raise the render's time or memory", () => {
    // The values: with them a template ran to 6 GB (794 MB and KT104 with defaults).
    const raised = { renderTimeout: 300, renderMemoryMB: 16384 };
    assert.deepEqual(effectiveSettings(raised, false), { compileOnSave: false, workspaceTrusted: false });
    const justAbove = { renderTimeout: 5.5, renderMemoryMB: 1025 };
    assert.deepEqual(effectiveSettings(justAbove, false), { compileOnSave: false, workspaceTrusted: false });
    const wrongType = { renderTimeout: "300", renderMemoryMB: Number.POSITIVE_INFINITY };
    assert.deepEqual(effectiveSettings(wrongType, false), { compileOnSave: false, workspaceTrusted: false });
    const lowered = { renderTimeout: 1, renderMemoryMB: 512 };
    assert.deepEqual(effectiveSettings(lowered, false), { ...lowered, compileOnSave: false, workspaceTrusted: false });
    // A trusted workspace passes them on (the server bounds them: 10 s, 2048 MB).
    assert.deepEqual(effectiveSettings(raised, true), { ...raised, workspaceTrusted: true });
  });
});
