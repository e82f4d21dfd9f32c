import { strict as assert } from "assert";

import { statusText, statusTooltip } from "../../src/logic/status";

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
