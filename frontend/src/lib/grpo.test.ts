import { describe, expect, it } from "vitest";
import { grpoAdvantage, grpoUsed, groupStats, loggedGroupStats } from "./grpo";

describe("GRPO group numbers", () => {
  it("uses the n−1 std, as torch.std and the engine do", () => {
    const s = groupStats([1, 0, 0, 0])!;
    expect(s.mean).toBe(0.25);
    expect(s.std).toBeCloseTo(0.5, 12); // sqrt(0.75 / 3); the population std would be 0.433
    expect(grpoAdvantage(1, s)).toBeCloseTo(1.5, 5);
    expect(grpoAdvantage(0, s)).toBeCloseTo(-0.5, 5);
    expect(grpoAdvantage(1, s, false)).toBe(0.75); // Dr. GRPO: no division by the std
  });
  it("a degenerate group has std 0 and advantage 0", () => {
    const d = groupStats([1, 1, 1])!;
    expect([d.mean, d.std, d.degenerate, grpoAdvantage(1, d)]).toEqual([1, 0, true, 0]);
    expect(groupStats([])).toBeNull();
  });
  it("a group of one has its real mean and no std; GRPO's advantage is its value (mean 0, std 1)", () => {
    const one = groupStats([1])!;
    expect([one.n, one.mean, one.std, one.degenerate]).toEqual([1, 1, null, false]);
    expect(grpoUsed(one)).toEqual({ mean: 0, std: 1 });
    expect(grpoAdvantage(0.7, groupStats([0.7])!)).toBeCloseTo(0.7, 5);
  });
  it("reads the mean and std the step used back from the logged advantages, from any part of the group", () => {
    const all = [1, 0, 0, 0.5];
    const s = groupStats(all)!;
    const logged = all.map((v) => Math.round(grpoAdvantage(v, s) * 1e5) / 1e5); // the engine logs 5 decimals
    // only the answers scoring above 0 are at hand (a score filter): the group's own numbers still come back
    const back = loggedGroupStats([1, 0.5], [logged[0], logged[3]])!;
    expect(back.mean).toBeCloseTo(s.mean, 4);
    expect(back.std!).toBeCloseTo(s.std!, 4);
    // Dr. GRPO: the mean only
    const centred = all.map((v) => v - s.mean);
    expect(loggedGroupStats([1], [centred[0]], false)).toEqual({ mean: s.mean, std: null });
  });
  it("says when it cannot read them back", () => {
    expect(loggedGroupStats([1, 1], [0, 0])).toBeNull(); // no two different values
    expect(loggedGroupStats([1, 0], [null, null])).toBeNull(); // nothing logged
    expect(loggedGroupStats([1, 0, 0.5], [1, -1, 0.9])).toBeNull(); // no one mean and std explain these
  });
});
