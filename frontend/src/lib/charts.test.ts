import { describe, expect, it } from "vitest";
import { CHARTS, chartKeys, chartQuery, COMPARE_CHARTS, passAtKKeys, passAtKNames } from "./charts";

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
  it("the held-out score is the core variable's mean@N: acc when the reward returns it, else reward", () => {
    const score = CHARTS.find((c) => c.id === "score")!;
    const keys = ["val-core/gsm8k/acc/mean@8", "val-core/arith/reward/mean@1", "val-aux/gsm8k/reward/mean@8",
      "val-core/gsm8k/acc/best@8/mean", "val-core/gsm8k/acc/std@8", "critic/score/mean"];
    expect(chartKeys(score, keys)).toEqual(["critic/score/mean", "val-core/arith/reward/mean@1", "val-core/gsm8k/acc/mean@8"]);
  });
});

describe("pass@k chart", () => {
  const passAtK = CHARTS.find((c) => c.id === "pass-at-k")!;
  // what validation_metrics.py logs for N = 8 with an `acc` and a `pred` column (std/worst left in to be ignored)
  const n8 = ["val-core/gsm8k/acc/mean@8", "val-core/gsm8k/acc/best@8/mean", "val-core/gsm8k/acc/maj@8/mean",
    "val-aux/gsm8k/acc/std@8", "val-aux/gsm8k/acc/best@8/std", "val-aux/gsm8k/acc/worst@8/mean",
    "val-aux/gsm8k/acc/best@2/mean", "val-aux/gsm8k/acc/best@4/mean", "val-aux/gsm8k/acc/maj@4/mean",
    "val-aux/gsm8k/reward/mean@8", "val-aux/gsm8k/reward/best@8/mean", "val-aux/gsm8k/reward/best@2/mean",
    "critic/score/mean", "actor/entropy"];

  it("draws best@k for every logged k in increasing k, then mean@N and maj@N, of the core variable only", () => {
    expect(chartKeys(passAtK, n8)).toEqual(["val-aux/gsm8k/acc/best@2/mean", "val-aux/gsm8k/acc/best@4/mean",
      "val-core/gsm8k/acc/best@8/mean", "val-core/gsm8k/acc/mean@8", "val-core/gsm8k/acc/maj@8/mean"]);
  });
  it("orders k as numbers (16 after 2) and needs no maj when answers cannot be voted", () => {
    const n16 = [16, 2, 8, 4].map((k) => `val-${k === 16 ? "core" : "aux"}/arith/reward/best@${k}/mean`)
      .concat(["val-core/arith/reward/mean@16"]);
    expect(passAtKKeys(n16)).toEqual(["val-aux/arith/reward/best@2/mean", "val-aux/arith/reward/best@4/mean",
      "val-aux/arith/reward/best@8/mean", "val-core/arith/reward/best@16/mean", "val-core/arith/reward/mean@16"]);
  });
  it("is absent for a run validated with one answer per prompt (no best@k), and on Compare", () => {
    expect(chartKeys(passAtK, ["val-core/arith/reward/mean@1", "critic/score/mean"])).toEqual([]);
    expect(passAtK.absent).toBeUndefined(); // no "absent" note: the chart is simply not drawn
    expect(COMPARE_CHARTS.map((c) => c.id)).not.toContain("pass-at-k");
  });
  it("names the lines pass@k, mean@N, maj@N; with two data sources, after their source", () => {
    const drawn = chartKeys(passAtK, n8);
    expect([...passAtKNames(drawn).values()]).toEqual(["pass@2", "pass@4", "pass@8", "mean@8", "maj@8"]);
    const two = chartKeys(passAtK, ["val-core/a/reward/best@2/mean", "val-core/a/reward/mean@2",
      "val-core/b/acc/best@2/mean", "val-core/b/acc/mean@2"]);
    expect(two).toEqual(["val-core/a/reward/best@2/mean", "val-core/a/reward/mean@2", "val-core/b/acc/best@2/mean", "val-core/b/acc/mean@2"]);
    expect([...passAtKNames(two).values()]).toEqual(["a/reward · pass@2", "a/reward · mean@2", "b/acc · pass@2", "b/acc · mean@2"]);
  });
  it("a data source whose name has slashes keeps them", () => {
    expect(passAtKKeys(["val-core/openai/gsm8k/acc/best@2/mean", "val-core/openai/gsm8k/acc/mean@2"]))
      .toEqual(["val-core/openai/gsm8k/acc/best@2/mean", "val-core/openai/gsm8k/acc/mean@2"]);
  });
});
