import { describe, expect, it } from "vitest";
import { degenerateReason, metricAlarms, runAlarms, sampleAlarms, THRESHOLDS } from "./alarms";
import type { Series } from "./series";

const S = (values: number[], start = 1): Series => ({
  steps: values.map((_, i) => i + start), values, walls: values.map(() => 0),
});
const ids = (a: { id: string }[]) => a.map((x) => x.id).sort();

describe("metric alarms", () => {
  it("a healthy run raises nothing", () => {
    const n = 40;
    expect(metricAlarms({
      "actor/reward_kl_penalty": S(Array.from({ length: n }, (_, i) => (i < 5 ? 0.001 : 0.05))),
      "critic/values/std": S(Array(n).fill(0.3)),
      "critic/score/mean": S(Array.from({ length: n }, (_, i) => i / n)),
      "response_length/clip_ratio": S(Array(n).fill(0.1)),
      "actor/pg_loss": S(Array(n).fill(0.01)),
    })).toEqual([]);
  });

  it("KL above 0.1 for several steps, not for one spike", () => {
    const spike = S([0.05, 0.5, 0.05, 0.05, 0.05, 0.05]);
    expect(metricAlarms({ "actor/kl_loss": spike })).toEqual([]);
    const high = S([0.05, 0.2, 0.2, 0.2, 0.2, 0.2, 0.05]);
    const a = metricAlarms({ "actor/kl_loss": high });
    expect(ids(a)).toEqual(["kl-high"]);
    expect(a[0].step).toBe(2);
  });

  it("KL below 0.01 only after the grace steps", () => {
    const early = S(Array(THRESHOLDS.klLowGraceSteps).fill(0));
    expect(metricAlarms({ "actor/reward_kl_penalty": early })).toEqual([]);
    const low = S(Array(30).fill(0.001));
    const a = metricAlarms({ "actor/reward_kl_penalty": low });
    expect(ids(a)).toEqual(["kl-low"]);
    expect(a[0].step).toBe(THRESHOLDS.klLowGraceSteps + 1);
  });

  it("NaN or Inf in a loss or grad norm is an error at its step", () => {
    const a = metricAlarms({ "actor/pg_loss": S([0.1, NaN, 0.1]), "actor/grad_norm": S([1, 2, Infinity]), "perf/throughput": S([NaN]) });
    expect(ids(a)).toEqual(["nonfinite:actor/grad_norm", "nonfinite:actor/pg_loss"]);
    expect(a.find((x) => x.key === "actor/pg_loss")!.step).toBe(2);
    expect(a.every((x) => x.severity === "error")).toBe(true);
  });

  it("critic values std, clip ratio", () => {
    expect(ids(metricAlarms({ "critic/values/std": S([0.5, 0.001, 0.001, 0.001]) }))).toEqual(["values-flat"]);
    expect(ids(metricAlarms({ "response_length/clip_ratio": S([0.9, 0.2, 0.8, 0.8, 0.8]) }))).toEqual(["clip-ratio"]);
  });

  it("score collapse compares recent to the best earlier window", () => {
    const rising = Array.from({ length: 20 }, (_, i) => 0.1 + i * 0.03);
    expect(metricAlarms({ "critic/score/mean": S(rising) })).toEqual([]);
    const collapsed = [...rising, 0.05, 0.02, 0.01, 0.0, 0.0];
    const a = metricAlarms({ "critic/score/mean": S(collapsed) });
    expect(ids(a)).toEqual(["score-collapse"]);
    expect(a[0].step).toBe(21);
    // never scored: no collapse
    expect(metricAlarms({ "critic/score/mean": S(Array(20).fill(0)) })).toEqual([]);
  });
});

describe("sample alarms", () => {
  it("detects empty and repetitive answers", () => {
    expect(degenerateReason({ step: 1, response: "  " })).toBe("empty answer");
    expect(degenerateReason({ step: 1, response: "the the the the the the the the the" })).toMatch(/repeated/);
    expect(degenerateReason({ step: 1, response: "I think so. I think so. I think so. I think so. I think so." })).toMatch(/phrase/);
    expect(degenerateReason({ step: 1, response: "12 + 30 = 42, so the answer is #### 42" })).toBeNull();
    expect(degenerateReason({ step: 1, response: "x", tokens: ["a", "a", "a", "a", "a", "a", "a", "a"] })).toMatch(/repeated/);
  });
  it("alarms on the newest step where enough answers degenerate", () => {
    const good = (step: number) => ({ step, response: "the answer is 4" });
    const bad = (step: number) => ({ step, response: "" });
    expect(sampleAlarms([good(1), good(1), bad(1), good(1), good(1)])).toEqual([]);
    const a = sampleAlarms([bad(1), bad(1), good(2), bad(2), bad(3), good(3)]);
    expect(a).toHaveLength(1);
    expect(a[0].step).toBe(3);
  });
});

describe("run alarms (Runs table and Run page)", () => {
  const answer = (step: number, response: string) => ({ step, response, tokens: null });
  it("judges only the newest step's answers, with the metric alarms", () => {
    const old = Array.from({ length: 4 }, () => answer(3, ""));
    const fresh = Array.from({ length: 4 }, () => answer(5, "12 + 3 = 15 #### 15"));
    expect(runAlarms({}, [...old, ...fresh])).toEqual([]);
    const bad = [answer(5, ""), answer(5, "7 7 7 7 7 7 7 7 7"), answer(5, "15"), answer(5, "15")];
    const a = runAlarms({ "actor/kl_loss": S([0.2, 0.2, 0.2, 0.2, 0.2]) }, [...old, ...bad]);
    expect(ids(a)).toEqual(["degenerate", "kl-high"]);
    const d = a.find((x) => x.id === "degenerate")!;
    expect(d.step).toBe(5);
    expect(d.detail).toContain("1 empty, 1 repetitive");
  });
  it("no samples, no sample alarm", () => {
    expect(runAlarms({}, [])).toEqual([]);
  });
});

describe("skipped updates", () => {
  it("a non-finite gradient's skipped step is an error naming its steps", () => {
    const flags = S([0, 0, 1, 0, 1, 0]);
    const a = metricAlarms({ "actor/grad_norm_nonfinite": flags, "actor/grad_norm": S([1, 1, NaN, 1, Infinity, 1]) });
    expect(ids(a)).toEqual(["skipped:actor"]); // not also "NaN in actor/grad_norm"
    expect(a[0].title).toBe("Actor update skipped at 2 steps");
    expect(a[0].detail).toContain("steps 3, 5");
    expect(a[0].step).toBe(5);
    expect(a[0].severity).toBe("error");
  });
  it("all-zero flags raise nothing; a critic skip is the critic's", () => {
    expect(metricAlarms({ "actor/grad_norm_nonfinite": S([0, 0, 0]) })).toEqual([]);
    const a = metricAlarms({ "critic/grad_norm_nonfinite": S([0, 1]) });
    expect(a.map((x) => x.title)).toEqual(["Critic update skipped at 1 step"]);
  });
});
