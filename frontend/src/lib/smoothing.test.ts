import { describe, expect, it } from "vitest";
import { ema, EmaState } from "./smoothing";

describe("ema", () => {
  it("is the identity at weight 0 and debiased otherwise", () => {
    expect(ema([1, 2, 3], 0)).toEqual([1, 2, 3]);
    const s = ema([10, 10, 10], 0.9);
    for (const v of s) expect(v).toBeCloseTo(10);
  });
  it("smooths a step and lets NaN through without poisoning", () => {
    const s = ema([0, 0, NaN, 1, 1], 0.5) as number[];
    expect(s[0]).toBe(0);
    expect(Number.isNaN(s[2])).toBe(true);
    expect(s[3]).toBeGreaterThan(0);
    expect(s[3]).toBeLessThan(1);
    expect(s[4]).toBeGreaterThan(s[3]);
  });
  it("the streaming form equals the batch form", () => {
    const values = [3, 1, 4, 1, 5, 9, 2, 6];
    const state = new EmaState(0.6);
    const streamed = values.map((v) => state.push(v));
    ema(values, 0.6).forEach((v, i) => expect(streamed[i]).toBeCloseTo(v as number));
  });
});
