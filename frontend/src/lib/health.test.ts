import { describe, expect, it } from "vitest";
import type { HealthAlarm, RunHealth } from "../api/health";
import { alarmLabel, fmtValues, samplesHref, splitAlarms } from "./health";

const alarm = (over: Partial<HealthAlarm>): HealthAlarm => ({
  id: "kl-high", severity: "warning", state: "firing", title: "KL above 0.1", detail: "", key: "actor/kl_loss",
  since_step: 5, cleared_step: null, values: {}, samples: null, ...over,
});

describe("samplesHref", () => {
  it("opens the Samples view at the alarm's step", () => {
    expect(samplesHref(3, { step: 12, filter: null })).toBe("/runs/3/samples?step=12");
    expect(samplesHref(3, { step: 12, filter: "  " })).toBe("/runs/3/samples?step=12");
  });
  it("turns the samples API's filter into the page's parameters, and other text into a search", () => {
    expect(samplesHref(3, { step: 12, filter: "uses_tool=false" })).toBe("/runs/3/samples?step=12&tool=-");
    expect(samplesHref(3, { step: 12, filter: "uses_tool=true&tool_error=true" })).toBe("/runs/3/samples?step=12&tool=*&tool_error=1");
    expect(samplesHref(3, { step: 12, filter: "order=-score" })).toBe("/runs/3/samples?step=12&view=table&sort=-score");
    expect(samplesHref(3, { step: 12, filter: "max_score=0&data_source=gsm8k&q=x" })).toBe("/runs/3/samples?step=12&max=0&source=gsm8k&q=x");
    expect(samplesHref(3, { step: 12, filter: "?step=99&min_score=1" })).toBe("/runs/3/samples?step=12&min=1"); // the alarm's step wins
    expect(samplesHref(3, { step: 12, filter: "\uFFFD & co" })).toBe("/runs/3/samples?step=12&q=%EF%BF%BD+%26+co");
  });
});

describe("fmtValues", () => {
  it("lists the numbers in the server's order, a few digits each", () => {
    expect(fmtValues({ "actor/kl_loss": 0.153846, threshold: 0.1 })).toBe("actor/kl_loss = 0.154, threshold = 0.1");
    expect(fmtValues({})).toBe("");
    expect(fmtValues(null)).toBe("");
  });
});

describe("splitAlarms", () => {
  it("firing errors first then warnings, newest first; cleared apart, newest clearing first", () => {
    const health: RunHealth = {
      run_id: 1, status: "error", checked_step: 30, thresholds: {}, alarms: [
        alarm({ id: "a", since_step: 4 }),
        alarm({ id: "b", since_step: 9 }),
        alarm({ id: "c", severity: "error", since_step: 2 }),
        alarm({ id: "d", state: "cleared", since_step: 1, cleared_step: 3 }),
        alarm({ id: "e", state: "cleared", since_step: 5, cleared_step: 20 }),
      ],
    };
    const { firing, findings, cleared } = splitAlarms(health);
    expect(firing.map((a) => a.id)).toEqual(["c", "b", "a"]);
    expect(cleared.map((a) => a.id)).toEqual(["e", "d"]);
    expect(findings).toEqual([]);
    expect(splitAlarms(null)).toEqual({ firing: [], findings: [], cleared: [] });
  });
  it("a closed step-one check stays a setup finding, apart from the alarms that went away; a firing one is firing", () => {
    const health: RunHealth = {
      run_id: 1, status: "error", checked_step: 9, thresholds: {}, alarms: [
        alarm({ id: "step1-kl", severity: "error", state: "cleared", since_step: 1, cleared_step: 2 }),
        alarm({ id: "step1-clip", severity: "error", since_step: 1 }),
        alarm({ id: "kl-high", state: "cleared", since_step: 3, cleared_step: 8 }),
      ],
    };
    const { firing, findings, cleared } = splitAlarms(health);
    expect(firing.map((a) => a.id)).toEqual(["step1-clip"]);
    expect(findings.map((a) => a.id)).toEqual(["step1-kl"]);
    expect(cleared.map((a) => a.id)).toEqual(["kl-high"]);
  });
});

describe("alarmLabel", () => {
  it("turns an id into words, its qualifier in brackets", () => {
    expect(alarmLabel("kl-high")).toBe("kl high");
    expect(alarmLabel("skipped:actor")).toBe("skipped (actor)");
    expect(alarmLabel("nonfinite:actor/pg_loss")).toBe("nonfinite (actor/pg_loss)");
  });
});
