import { describe, expect, it } from "vitest";
import { chartKeys, chartQuery, COMPARE_CHARTS } from "./charts";

describe("chart query", () => {
  it("asks for the exact keys and sends the patterns for the server to expand", () => {
    const { keys, patterns } = chartQuery(COMPARE_CHARTS);
    expect(keys).toContain("actor/pg_loss");
    expect(keys).toContain("response_length/clip_ratio"); // y2 keys too
    expect(keys).toContain("timing_s/step"); // Compare shows the step time, not the breakdown
    expect(new Set(keys).size).toBe(keys.length);
    expect(patterns).toHaveLength(1);
    expect(patterns[0].test("val-core/arith/reward/mean@1")).toBe(true);
    expect(patterns[0].test("critic/score/mean")).toBe(true);
    expect(patterns[0].test("val-core/arith/reward/std@1")).toBe(false);
  });
  it("a chart draws what the query returned for it", () => {
    const score = COMPARE_CHARTS.find((c) => c.id === "score")!;
    expect(chartKeys(score, ["val-core/b/reward/mean@1", "critic/score/mean", "x"])).toEqual(["critic/score/mean", "val-core/b/reward/mean@1"]);
  });
});
