import { strict as assert } from "assert";

import { pythonDocumentFilters, pythonFilesNamed, sameFiles } from "../../src/logic/pythonFiles";

describe("Python files holding templates", () => {
  it("finds the files kls.toml names as file.py::CONSTANT", () => {
    const toml = [
      "[instances.a]",
      'template = "gemm_template.py::GEMM_TEMPLATE_CUTLASS_3X"',
      "argument_template = 'sub/args.py::ARGS'",
      'epilogue_template = "gemm_template.py::EPI"',
      'kernel_name = "x.py::NOT_A_TEMPLATE_KEY"',
      'instances.c = { kernel_name = "k", template = "inline.py::T" }',
      '[instances.b]\ntemplate = "plain.cu.jinja"',
    ].join("\n");
    assert.deepEqual(pythonFilesNamed("/proj/kls.toml", toml), [
      "/proj/gemm_template.py",
      "/proj/inline.py",
      "/proj/sub/args.py",
    ]);
  });
  it("keeps the python language in every filter, adding the user's patterns", () => {
    assert.deepEqual(pythonDocumentFilters(["/proj/t.py"], ["**/templates_*.py", ""]), [
      { language: "python", scheme: "file", pattern: "/proj/t.py" },
      { language: "python", scheme: "file", pattern: "**/templates_*.py" },
    ]);
  });
  it("compares lists of files", () => {
    assert.ok(sameFiles(["/a.py"], ["/a.py"]));
    assert.ok(!sameFiles(["/a.py"], ["/a.py", "/b.py"]));
  });
});
