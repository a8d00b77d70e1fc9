import { describe, expect, it } from "vitest";
import { pageSummary } from "./samplesPage";

describe("pageSummary", () => {
  it("says which answers the page holds and what the groups count", () => {
    // PPO (n = 1): 256 answers, 200 a page: no "200 prompt groups" next to "256 samples"
    expect(pageSummary(256, 200, 0, 200, Array(200).fill(1))).toBe("answers 1–200 of 256 (page 1 of 2) · on this page: 200 prompts, 1 answer each");
    expect(pageSummary(256, 200, 200, 56, Array(56).fill(1))).toBe("answers 201–256 of 256 (page 2 of 2) · on this page: 56 prompts, 1 answer each");
    expect(pageSummary(16, 200, 0, 16, [4, 4, 4, 4])).toBe("16 answers to 4 prompts, 4 answers each");
    expect(pageSummary(10, 200, 0, 10, [8, 2])).toBe("10 answers to 2 prompts, 2–8 answers each");
    expect(pageSummary(1, 200, 0, 1, [1])).toBe("1 answer to 1 prompt, 1 answer each");
  });
});
