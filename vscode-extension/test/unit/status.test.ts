import { strict as assert } from "assert";

import { jobSummary, statusText, statusTooltip } from "../../src/logic/status";

describe("status bar", () => {
  it("shows the active instance", () => {
    assert.equal(statusText({ instance: "sm90_bf16_4096", state: "running", jobs: [] }), "$(circuit-board) kls: sm90_bf16_4096");
  });
  it("shows running jobs", () => {
    assert.equal(
      statusText({ instance: "a", state: "running", jobs: ["check a", "benchmark a"] }),
      "$(sync~spin) kls: a · check a (+1)",
    );
  });
  it("offers to cancel running jobs", () => {
    assert.match(statusTooltip({ instance: "a", state: "running", jobs: ["check a"] }), /check a \(click to cancel\)/);
  });
  it("says when kls is missing or stopped", () => {
    assert.equal(statusText({ state: "missing", jobs: [] }), "$(warning) kls: not installed");
    assert.equal(statusText({ state: "stopped", jobs: [] }), "$(debug-stop) kls: stopped");
    assert.match(statusTooltip({ state: "running", jobs: [] }), /No instance/);
  });
});

describe("job summary", () => {
  it("says cancelled, the benchmark headline, the error or the outcome", () => {
    assert.equal(jobSummary({ ok: false, cancelled: true }), "cancelled");
    assert.equal(jobSummary({ ok: true, headline: "12.3 µs" }), "12.3 µs");
    assert.equal(jobSummary({ ok: false, error: "no instance" }), "no instance");
    assert.equal(jobSummary({ ok: true, seconds: 1.5 }), "ok (1.5 s)");
    assert.equal(jobSummary({ ok: false, errors: 2 }), "failed, 2 error(s)");
    assert.equal(jobSummary(undefined), "no answer");
  });
});
