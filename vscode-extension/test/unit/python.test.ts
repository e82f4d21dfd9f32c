import { strict as assert } from "assert";

import { chooseInterpreter, expandHome, importCheckArgs, installArgs } from "../../src/logic/python";

describe("interpreter discovery", () => {
  it("prefers the kls setting", () => {
    assert.deepEqual(chooseInterpreter("/opt/py/bin/python", "/usr/bin/python3.11"), {
      path: "/opt/py/bin/python",
      source: "setting",
    });
  });
  it("then the Python extension's active interpreter", () => {
    assert.deepEqual(chooseInterpreter("  ", "/venv/bin/python"), {
      path: "/venv/bin/python",
      source: "python-extension",
    });
  });
  it("then python3", () => {
    assert.deepEqual(chooseInterpreter(undefined, undefined), { path: "python3", source: "default" });
  });
  it("expands ~ in the setting", () => {
    assert.equal(expandHome("~/venv/bin/python", "/home/me"), "/home/me/venv/bin/python");
    assert.equal(chooseInterpreter("~/p", undefined).path.endsWith("/p"), true);
  });
  it("checks the import and installs with pip", () => {
    assert.deepEqual(importCheckArgs().slice(0, 1), ["-c"]);
    assert.ok(importCheckArgs()[1].includes("import kls.cli"));
    assert.deepEqual(installArgs("/src/kls"), ["-m", "pip", "install", "--upgrade", "/src/kls"]);
    assert.deepEqual(installArgs(""), ["-m", "pip", "install", "--upgrade", "kls"]);
  });
});
