import { strict as assert } from "assert";

import { assemblyUriString, lineRuns, noInstructionsMessage } from "../../src/logic/assembly";

describe("assembly view", () => {
  it("names a listing by template, kind and instance", () => {
    const text = assemblyUriString("/work/t/mm.py.jinja", "ptx", "mm bf16");
    assert.equal(text, "kls-asm:/work/t/mm.py.jinja.ptx?instance=mm%20bf16");
    assert.equal(assemblyUriString("/a/k.py.jinja", "sass"), "kls-asm:/a/k.py.jinja.sass");
  });
  it("selects the instructions of a line as runs of consecutive lines", () => {
    assert.deepEqual(lineRuns([12, 10, 11, 40, 41, 11, 7]), [
      [7, 7],
      [10, 12],
      [40, 41],
    ]);
    assert.deepEqual(lineRuns([]), []);
    assert.deepEqual(lineRuns([-1, 2.5, 3]), [[3, 3]]);
  });
  it("says why a line has no instructions, 1-based", () => {
    assert.match(noInstructionsMessage("sass", 42), /^kls: line 43 has no SASS instructions/);
  });
});
