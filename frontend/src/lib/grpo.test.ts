import { describe, expect, it } from "vitest";
import { grpoAdvantage, grpoGroupStats } from "./grpo";

describe("GRPO group numbers", () => {
  it("uses the n−1 std, as torch.std and the engine do", () => {
    const s = grpoGroupStats([1, 0, 0, 0])!;
    expect(s.mean).toBe(0.25);
    expect(s.std).toBeCloseTo(0.5, 12); // sqrt(0.75 / 3); the population std would be 0.433
    expect(grpoAdvantage(1, s)).toBeCloseTo(1.5, 5);
    expect(grpoAdvantage(0, s)).toBeCloseTo(-0.5, 5);
    expect(grpoAdvantage(1, s, false)).toBe(0.75); // Dr. GRPO: no division by the std
  });
  it("a degenerate group has std 0 and advantage 0; a group of one keeps its score", () => {
    const d = grpoGroupStats([1, 1, 1])!;
    expect([d.mean, d.std, d.degenerate, grpoAdvantage(1, d)]).toEqual([1, 0, true, 0]);
    const one = grpoGroupStats([0.7])!;
    expect([one.mean, one.std]).toEqual([0, 1]);
    expect(grpoAdvantage(0.7, one)).toBeCloseTo(0.7, 5);
    expect(grpoGroupStats([])).toBeNull();
  });
});
