import { describe, expect, it } from "vitest";
import { CHARTS, chartKeys } from "./charts";
import type { Series } from "./series";
import {
  isAsyncConfig, loggedOffPolicy, offPolicyRows, STALENESS_CHART, stalenessLabel, tokenVersions, versionAge, versionLabel,
  withStaleness,
} from "./staleness";

const series = (values: number[]): Series => ({ steps: values.map((_, i) => i + 1), values, walls: values.map(() => 0) });
const P = "training/off_policy";

describe("the staleness chart", () => {
  it("draws verl's off-policy metrics: staleness and worst on top, spans and evictions in panels", () => {
    const keys = chartKeys(STALENESS_CHART, [`${P}/trajectory_staleness/mean`, `${P}/trajectory_staleness_worst/max`,
      `${P}/trajectory_spans/max`, `${P}/evicted_samples`, `${P}/evicted_samples_staleness/mean`, "actor/pg_loss"]);
    expect(keys).toEqual([`${P}/trajectory_staleness/mean`, `${P}/trajectory_staleness_worst/max`,
      `${P}/trajectory_spans/max`, `${P}/evicted_samples`]);
    expect(STALENESS_CHART.panels!.map((p) => p.keys[0])).toEqual([`${P}/trajectory_spans/mean`, `${P}/evicted_samples`]);
  });
  it("shows for a run that trained off-policy, not for a sync run's flat on-policy values", () => {
    const sync = new Map([[`${P}/trajectory_staleness/max`, series([0, 0, 0])], [`${P}/trajectory_spans/max`, series([1, 1, 1])],
      [`${P}/trajectory_staleness_worst/max`, series([0, NaN, 0])]]);
    expect(loggedOffPolicy(sync)).toBe(false);
    expect(loggedOffPolicy(undefined)).toBe(false);
    expect(loggedOffPolicy(new Map([...sync, [`${P}/trajectory_staleness/max`, series([0, 1, 1])]]))).toBe(true);
    expect(loggedOffPolicy(new Map([...sync, [`${P}/trajectory_spans/max`, series([1, 2])]]))).toBe(true); // crossed an update
    expect(loggedOffPolicy(new Map([[`${P}/evicted_samples`, series([0, 3])]]))).toBe(true);
  });
  it("or when the run's config is one of verl's asynchronous modes", () => {
    expect(isAsyncConfig({ trainer: { use_v1: true, v1: { trainer_mode: "colocate_async" } } })).toBe(true);
    expect(isAsyncConfig({ trainer: { use_v1: true, v1: { trainer_mode: "separate_async" } } })).toBe(true);
    expect(isAsyncConfig({ trainer: { use_v1: true, v1: { trainer_mode: "sync" } } })).toBe(false);
    expect(isAsyncConfig({ trainer: { use_v1: false, v1: { trainer_mode: "colocate_async" } } })).toBe(false); // legacy trainer
    expect(isAsyncConfig(undefined)).toBe(false);
  });
  it("goes second on the Run page, only when asked for", () => {
    expect(withStaleness(CHARTS, false)).toBe(CHARTS);
    const ids = withStaleness(CHARTS, true).map((c) => c.id);
    expect(ids[1]).toBe("staleness");
    expect(ids).toHaveLength(CHARTS.length + 1);
  });
});

describe("an answer's versions", () => {
  it("reads v12 or v11–12 and its staleness at the trained step", () => {
    expect(versionLabel({ step: 13, policy_version_min: 12, policy_version_max: 12 })).toBe("v12");
    expect(versionLabel({ step: 13, policy_version_min: 11, policy_version_max: 12 })).toBe("v11–12");
    expect(versionLabel({ step: 13 })).toBeNull();
    expect(stalenessLabel({ step: 13, policy_version_min: 12, policy_version_max: 12, staleness: 0 })).toBe("on-policy");
    expect(stalenessLabel({ step: 13, policy_version_min: 11, policy_version_max: 11, staleness: 1, staleness_worst: 1 }))
      .toBe("1 version stale");
    expect(stalenessLabel({ step: 13, policy_version_min: 9, policy_version_max: 11 })).toBe("1 version stale; oldest token 3 behind");
    expect(stalenessLabel({ step: 13, policy_version_min: 10, policy_version_max: 12 })).toBe("on-policy; oldest token 2 behind");
    expect(stalenessLabel({ step: 13 })).toBeNull();
  });
  it("gets a table column only when the run trained off-policy", () => {
    expect(offPolicyRows([{ step: 3, policy_version_min: 2, policy_version_max: 2, staleness: 0 }, { step: 3 }])).toBe(false);
    expect(offPolicyRows([{ step: 3, policy_version_min: 1, policy_version_max: 1, staleness: 1 }])).toBe(true);
    expect(offPolicyRows([{ step: 3, policy_version_min: 1, policy_version_max: 2, staleness: 0 }])).toBe(true);
  });
  it("colours each token by its version's age; a summary with one version stands for every token", () => {
    const crossed = { step: 5, policy_versions: [3, 3, 4], policy_version_min: 3, policy_version_max: 4 };
    expect(tokenVersions(crossed, 4)).toEqual([3, 3, 4, null]);
    expect(tokenVersions(crossed, 4)!.map((v) => versionAge(5, v))).toEqual([1, 1, 0, null]);
    expect(tokenVersions({ step: 5, policy_version_min: 2, policy_version_max: 2 }, 2)).toEqual([2, 2]);
    expect(tokenVersions({ step: 5, policy_version_min: 2, policy_version_max: 4 }, 2)).toBeNull(); // which token is which: unknown
    expect(tokenVersions({ step: 5 }, 2)).toBeNull();
  });
});
