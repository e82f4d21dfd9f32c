import { strict as assert } from "assert";

import { parsePreviewUri, previewAffectedBy, previewUriString } from "../../src/logic/preview";

describe("preview URIs", () => {
  it("round-trips a template path and instance", () => {
    const text = previewUriString("/work/t/gemm.cu.jinja", "sm90 bf16");
    assert.equal(text, "kls-preview:/work/t/gemm.cu.jinja.cu?instance=sm90%20bf16");
    const url = new URL(text);
    assert.deepEqual(parsePreviewUri("kls-preview", url.pathname, url.search.slice(1)), {
      templatePath: "/work/t/gemm.cu.jinja",
      instance: "sm90 bf16",
    });
  });
  it("matches the server's format without an instance", () => {
    assert.equal(previewUriString("/a/b.cu.jinja"), "kls-preview:/a/b.cu.jinja.cu");
    assert.deepEqual(parsePreviewUri("kls-preview", "/a/b.cu.jinja.cu", ""), {
      templatePath: "/a/b.cu.jinja",
      instance: undefined,
    });
  });
  it("ignores other schemes", () => {
    assert.equal(parsePreviewUri("file", "/a/b.cu", ""), undefined);
  });
  it("refreshes on the template, sub-templates and kls.toml", () => {
    const target = { templatePath: "/w/gemm.cu.jinja" };
    assert.ok(previewAffectedBy(target, "/w/gemm.cu.jinja"));
    assert.ok(previewAffectedBy(target, "/w/args.cuh.jinja"));
    assert.ok(previewAffectedBy(target, "/w/kls.toml"));
    assert.ok(!previewAffectedBy(target, "/w/other.cu.jinja"));
  });
  it("names a Triton template's preview as Python", () => {
    const text = previewUriString("/work/t/mm.py.jinja", "mm");
    assert.ok(text.split("?")[0].endsWith("mm.py.jinja.py"));
    const url = new URL(text);
    assert.deepEqual(parsePreviewUri("kls-preview", url.pathname, url.search.slice(1)), {
      templatePath: "/work/t/mm.py.jinja",
      instance: "mm",
    });
    assert.equal(parsePreviewUri("kls-preview", "/work/t/g.cu.jinja.py", ""), undefined);
  });
});
