import { describe, expect, it } from "vitest";
import { pairFor, validationPair } from "./pairSteps";

describe("side-by-side pairing", () => {
  it("pairs the nearest training step that shares prompts", () => {
    expect(pairFor({ aStep: 263, bStep: 264, sameRun: true, overlapping: [701, 27], aVal: [0, 100], bVal: [0, 100] }))
      .toEqual({ a: 701, b: 264, split: "train", why: "nearest-train" });
  });
  it("falls back to two validations of the run", () => {
    expect(pairFor({ aStep: 263, bStep: 264, sameRun: true, overlapping: [], aVal: [0, 100, 200, 300], bVal: [0, 100, 200, 300] }))
      .toEqual({ a: 200, b: 300, split: "val", why: "validation" });
    expect(validationPair(5, 7, [0, 100], [0, 100], true)).toEqual([0, 100]);
    expect(validationPair(5, 7, [0], [0], true)).toBeNull();
    expect(validationPair(5, 7, [0], [10, 20], false)).toEqual([0, 10]); // two runs: each its nearest
  });
  it("gives up only when nothing is shared and there are no validations", () => {
    expect(pairFor({ aStep: 1, bStep: 2, sameRun: true, overlapping: [], aVal: [], bVal: [] })).toBeNull();
  });
});
