import { describe, expect, it } from "vitest";
import { arrivals, countLine, newestComplete, pageSummary } from "./samplesPage";

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

describe("arrivals", () => {
  const steps = (...rows: [number, string, number][]) => rows.map(([step, split, count]) => ({ step, split, count }));

  it("holds a step complete once anything after it arrived, or once it has its predecessor's count", () => {
    const s = steps([0, "val", 32], [1, "train", 256], [2, "train", 256], [3, "train", 64]);
    const a = arrivals(s, true);
    expect(a.get("val:0")).toEqual({ complete: true, expected: null });
    expect(a.get("train:2")!.complete).toBe(true);
    expect(a.get("train:3")).toEqual({ complete: false, expected: 256 }); // half ingested: "64 of 256"
    expect(newestComplete(s, a)).toBe(2);
    expect(countLine(64, a.get("train:3"))).toBe("64 of 256 answers so far");
    expect(countLine(256, a.get("train:2"))).toBe("256 answers");
    // all 256 in: complete before the next step begins
    expect(arrivals(steps([1, "train", 256], [2, "train", 256]), true).get("train:2")!.complete).toBe(true);
  });

  it("a step's val answers come after its train answers; a finished run's steps are all complete", () => {
    const s = steps([4, "train", 16], [4, "val", 8]);
    const a = arrivals(s, true);
    expect(a.get("train:4")!.complete).toBe(true); // its val answers began: the train ones are in
    expect(a.get("val:4")).toEqual({ complete: false, expected: null }); // no val step before it to count on
    expect(countLine(8, a.get("val:4"))).toBe("8 answers so far");
    expect(arrivals(s, false).get("val:4")!.complete).toBe(true);
    // the first step of a run, still arriving, is what a following page shows: nothing else to show
    const first = steps([1, "train", 64]);
    expect(newestComplete(first, arrivals(first, true))).toBe(0);
    expect(newestComplete([], new Map())).toBe(-1);
  });
});
