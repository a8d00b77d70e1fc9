import { describe, expect, it } from "vitest";
import { CHARTS, chartKeys, chartQuery, COMPARE_CHARTS } from "./charts";

describe("chart query", () => {
  it("asks for the exact keys and sends the patterns for the server to expand", () => {
    const { keys, patterns } = chartQuery(COMPARE_CHARTS);
    expect(keys).toContain("actor/pg_loss");
    expect(keys).toContain("response_length/clip_ratio"); // a panel's keys too
    expect(keys).toContain("actor/grad_norm_nonfinite"); // and the flags'
    expect(keys).toContain("timing_s/step"); // Compare shows the step time, not the breakdown
    expect(new Set(keys).size).toBe(keys.length);
    expect(patterns).toHaveLength(1);
    expect(patterns[0].test("val-core/arith/reward/mean@1")).toBe(true);
    expect(patterns[0].test("critic/score/mean")).toBe(true);
    expect(patterns[0].test("val-core/arith/reward/std@1")).toBe(false);
  });
  it("the KL chart is KL to the reference only, and says so when the run has none", () => {
    const kl = COMPARE_CHARTS.find((c) => c.id === "kl")!;
    expect(chartKeys(kl, ["actor/ppo_kl", "critic/score/mean"])).toEqual([]);
    expect(kl.absent).toMatch(/no KL to the reference/);
    expect(chartKeys(kl, ["actor/ppo_kl", "actor/kl_loss"])).toEqual(["actor/kl_loss"]);
    const update = COMPARE_CHARTS.find((c) => c.id === "update")!;
    expect(chartKeys(update, ["actor/ppo_kl", "actor/pg_clipfrac"])).toEqual(["actor/ppo_kl", "actor/pg_clipfrac"]);
  });
  it("a chart draws what the query returned for it", () => {
    const score = COMPARE_CHARTS.find((c) => c.id === "score")!;
    expect(chartKeys(score, ["val-core/b/reward/mean@1", "critic/score/mean", "x"])).toEqual(["critic/score/mean", "val-core/b/reward/mean@1"]);
  });
  it("no chart draws on a second y axis: other scales are panels below, 0/1 flags are markers on the step axis", () => {
    const grad = CHARTS.find((c) => c.id === "grad-norm")!;
    expect(chartKeys(grad, ["critic/grad_norm", "actor/grad_norm_nonfinite", "actor/grad_norm"]))
      .toEqual(["actor/grad_norm", "critic/grad_norm", "actor/grad_norm_nonfinite"]);
    expect(grad.flags?.keys).toContain("actor/grad_norm_nonfinite");
    const length = CHARTS.find((c) => c.id === "response-length")!;
    expect(length.panels?.[0]).toMatchObject({ keys: ["response_length/clip_ratio"], percent: true });
    for (const c of CHARTS) expect(Object.keys(c)).not.toContain("y2");
  });
  it("the Run page breaks the step time down (timing_s/step included, for the rest of the step); Compare overlays it", () => {
    const timing = CHARTS.find((c) => c.id === "timing")!;
    expect(timing.breakdown).toBe(true);
    expect(chartKeys(timing, ["timing_s/gen", "timing_s/step", "actor/lr"])).toEqual(["timing_s/gen", "timing_s/step"]);
    const compared = COMPARE_CHARTS.find((c) => c.id === "timing")!;
    expect(compared.breakdown).toBeUndefined();
    expect(compared.keys).toEqual(["timing_s/step"]);
  });
});
