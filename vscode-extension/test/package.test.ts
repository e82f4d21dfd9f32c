// `vsce package` builds the .vsix; check what is inside it.
import { strict as assert } from "assert";
import { execFileSync } from "child_process";
import * as fs from "fs";
import * as os from "os";
import * as path from "path";

const ROOT = path.resolve(__dirname, "..", "..");

function zipEntries(file: string): string[] {
  const script = "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))";
  return execFileSync("python3", ["-c", script, file], { encoding: "utf8" }).trim().split("\n");
}

describe("the .vsix", function () {
  this.timeout(180_000);
  let entries: string[];
  let vsix: string;

  before(() => {
    vsix = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "kls-vsix-")), "kls.vsix");
    // README images link into the repository (docs/images): no Marketplace to rewrite them for.
    execFileSync("npx", ["vsce", "package", "--no-dependencies", "--no-rewrite-relative-links", "--out", vsix], {
      cwd: ROOT,
      stdio: "pipe",
    });
    entries = zipEntries(vsix);
  });

  it("holds the bundle, the grammar and package.json", () => {
    for (const needed of [
      "extension/dist/extension.js",
      "extension/syntaxes/cuda-jinja.tmLanguage.json",
      "extension/syntaxes/python-jinja.tmLanguage.json",
      "extension/language-configuration.json",
      "extension/python-jinja-language-configuration.json",
      "extension/package.json",
    ]) {
      assert.ok(entries.includes(needed), `${needed} missing from ${entries.join(", ")}`);
    }
  });

  it("leaks nothing from node_modules, sources or tests", () => {
    const leaks = entries.filter((e) => /node_modules|\/src\/|\/test\/|\/out\//.test(e));
    assert.deepEqual(leaks, []);
  });

  it("bundles vscode-languageclient into one file", () => {
    const bundle = fs.readFileSync(path.join(ROOT, "dist", "extension.js"), "utf8");
    assert.ok(bundle.includes("workspace/configuration"));
    assert.ok(fs.statSync(vsix).size < 1_000_000);
  });
});
