import { describe, expect, it } from "vitest";
import { importanceWeights, logProbGap, mismatchSummary } from "./tokenMismatch";

const sample = { old_log_probs: [-0.1, -0.2, -0.3, null], extras: { rollout_log_probs: [-0.1, -0.9, -0.25, -1] } };

describe("rollout vs actor", () => {
  it("per token: the gap and the importance weight", () => {
    const gap = logProbGap(sample)!;
    expect(gap[0]).toBe(0);
    expect(gap[1]).toBeCloseTo(-0.7, 12);
    expect(gap[2]).toBeCloseTo(0.05, 12);
    expect(gap[3]).toBeNull();
    const w = importanceWeights(sample)!;
    expect(w[1]).toBeCloseTo(Math.exp(0.7), 12); // the actor likes the token more than the rollout did
    expect(w[3]).toBeNull();
  });
  it("per answer: the largest gap and how many tokens are over the threshold", () => {
    const s = mismatchSummary(sample)!;
    expect(s.maxAbs).toBeCloseTo(0.7, 12);
    expect([s.over, s.tokens]).toEqual([1, 3]);
    expect(mismatchSummary({ old_log_probs: [-0.1], extras: {} })).toBeNull();
    expect(mismatchSummary({ old_log_probs: null, extras: { rollout_log_probs: [-0.1] } })).toBeNull();
  });
});
