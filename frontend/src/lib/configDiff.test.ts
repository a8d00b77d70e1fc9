import { describe, expect, it } from "vitest";
import { diffConfigs, flatten, unflatten } from "./configDiff";

describe("configDiff", () => {
  it("flattens and unflattens", () => {
    const c = { a: { b: 1, c: [1, 2] }, d: null, e: {} };
    expect(flatten(c)).toEqual({ "a.b": 1, "a.c": [1, 2], d: null, e: {} });
    expect(unflatten({ "a.b": 1, "a.c": 2, x: "y" })).toEqual({ a: { b: 1, c: 2 }, x: "y" });
  });
  it("keeps only differing keys, absent keys included", () => {
    const rows = diffConfigs([
      { algo: { adv: "grpo" }, lr: 1e-6, same: [1], only1: true },
      { algo: { adv: "gae" }, lr: 1e-6, same: [1] },
    ]);
    expect(rows.map((r) => r.key)).toEqual(["algo.adv", "only1"]);
    expect(rows[1].values).toEqual([true, undefined]);
    expect(diffConfigs([{ a: 1 }, { a: 1 }])).toEqual([]);
  });
});
