import * as assert from "assert";

import { SingleFlight } from "../../src/logic/singleFlight";

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => undefined;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe("SingleFlight (client restarts)", () => {
  it("never runs two at once, and coalesces requests made meanwhile into one more run", async () => {
    let active = 0;
    let maxActive = 0;
    let runs = 0;
    const gates = [deferred(), deferred()];
    const flight = new SingleFlight(async () => {
      active += 1;
      maxActive = Math.max(maxActive, active);
      const gate = gates[runs];
      runs += 1;
      await gate.promise;
      active -= 1;
    });
    const first = flight.run();
    const second = flight.run(); // e.g. trust granted
    const third = flight.run(); // and a setting changed, during the first restart
    assert.strictEqual(runs, 1);
    assert.ok(flight.busy);
    gates[0].resolve();
    await first;
    gates[1].resolve();
    await Promise.all([second, third]);
    assert.strictEqual(runs, 2);
    assert.strictEqual(maxActive, 1);
    assert.ok(!flight.busy);
  });

  it("runs again after a failed run", async () => {
    let runs = 0;
    const flight = new SingleFlight(async () => {
      runs += 1;
      if (runs === 1) {
        throw new Error("start failed");
      }
    });
    await assert.rejects(flight.run());
    await flight.run();
    assert.strictEqual(runs, 2);
  });

  it("a request during a failing run still gets its run", async () => {
    let runs = 0;
    const gate = deferred();
    const flight = new SingleFlight(async () => {
      runs += 1;
      if (runs === 1) {
        await gate.promise;
        throw new Error("first failed");
      }
    });
    const first = flight.run();
    const second = flight.run();
    gate.resolve();
    await assert.rejects(first);
    await second;
    assert.strictEqual(runs, 2);
  });
});
