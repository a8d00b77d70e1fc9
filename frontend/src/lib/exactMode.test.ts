import { describe, expect, it } from "vitest";
import { diffConfigs } from "./configDiff";
import { exactFact, isExactConfig } from "./exactMode";
import type { Series } from "./series";

const series = (values: number[]): Series => ({ steps: values.map((_, i) => i + 1), values, walls: values.map(() => 0) });
const exact = { actor_rollout_ref: { rollout: { exact: true, n: 4 } } };
const plain = { actor_rollout_ref: { rollout: { exact: false, n: 4 } } };

describe("exact mode on the Run page", () => {
  it("says nothing for a run not in exact mode", () => {
    expect(isExactConfig(plain)).toBe(false);
    expect(exactFact(plain, new Map([["exact/mismatched_tokens", series([0])]]))).toBeNull();
    expect(exactFact(undefined, undefined)).toBeNull();
  });
  it("shows the mismatched tokens over every step: 0 for an exact run", () => {
    const fact = exactFact(exact, new Map([["exact/mismatched_tokens", series([0, 0])],
      ["exact/checked_tokens", series([217, 231])]]));
    expect(fact?.text).toBe("exact: 0");
    expect(fact?.title).toContain("2 steps");
    expect(fact?.title).toContain("448 tokens checked");
    expect(exactFact(exact, new Map([["exact/mismatched_tokens", series([0, 3])]]))?.text).toBe("exact: 3");
    expect(exactFact(exact, new Map())?.text).toBe("exact: –");
  });
  it("and Compare's config diff names the key between an exact and a default run", () => {
    const rows = diffConfigs([exact, plain]);
    expect(rows.map((r) => r.key)).toEqual(["actor_rollout_ref.rollout.exact"]);
  });
});
