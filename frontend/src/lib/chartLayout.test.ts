import { describe, expect, it } from "vitest";
import { axisNumbers, constantRange, pointsForGrid, duplicateOf, flaggedSteps, fmtShare, fmtSI, groupIntoPanels, maxAbs, panelDomains, valueFormat, wantsMarkers } from "./chartLayout";

describe("number formats", () => {
  it("SI prefixes with 3 significant digits for large numbers, never below 1", () => {
    expect(fmtSI(0.00073)).toBe("0.00073"); // no SI prefix below 1: "5m" reads as minutes
    expect(fmtSI(0.00152)).toBe("0.00152");
    expect(fmtSI(1 / 256)).toBe("0.00391");
    expect(fmtSI(12_845)).toBe("12.8k");
    expect(fmtSI(999_700)).toBe("1M"); // not "1000k"
    expect(fmtSI(1e-6)).toBe("0.000001");
    expect(fmtSI(1.5e-7)).toBe("1.5e-7");
    expect(fmtSI(-2.5e-4)).toBe("-0.00025");
    expect(fmtSI(0.5)).toBe("0.5");
    expect(fmtSI(241.37)).toBe("241");
    expect(fmtSI(0)).toBe("0");
    expect(fmtSI(NaN)).toBe("NaN");
  });
  it("shares as whole percents, one significant digit under 1%", () => {
    expect(fmtShare(0.097)).toBe("10%");
    expect(fmtShare(0.4612)).toBe("46%");
    expect(fmtShare(0.0004)).toBe("0.04%");
    expect(fmtShare(0.008)).toBe("0.8%");
    expect(fmtShare(0)).toBe("0%");
    expect(fmtShare(NaN)).toBe("0%");
  });
  it("hover format from the panel's largest value", () => {
    expect(valueFormat(0.0016)).toBe(".3~g");
    expect(valueFormat(12_800)).toBe(".3~s");
    expect(valueFormat(0.8)).toBe(".4~g");
    expect(valueFormat(256)).toBe(".4~g");
    expect(valueFormat(0)).toBe(".4~g"); // an all-zero panel
    expect(maxAbs([0.1, null, NaN, -3, Infinity])).toBe(3);
  });
  it("axis ticks: SI from 1 up, plain decimals below (a loss axis reads 0.005, not 5m)", () => {
    expect(axisNumbers(12_800)).toMatchObject({ exponentformat: "SI" });
    expect(axisNumbers(1.4)).toMatchObject({ exponentformat: "SI" });
    expect(axisNumbers(0.005)).toEqual({ tickformat: "~g", separatethousands: false });
    expect(axisNumbers(0)).toEqual({ tickformat: "~g", separatethousands: false }); // all zero: 0, not 0m
    expect(axisNumbers(2e-6)).toEqual({ tickformat: "~e", separatethousands: false }); // a learning rate: 2e-6, not 2µ
  });
});

describe("panels", () => {
  const mags: Record<string, number> = { "actor/grad_norm": 1.4, "critic/grad_norm": 60, "actor/lr": 1e-6, "critic/lr": 1e-6,
    "response_length/mean": 240, "response_length/max": 256, "response_length/clip_ratio": 1 / 256, "x/zero": 0 };
  const mag = (k: string) => mags[k] ?? 0;
  it("keeps keys of one scale on one panel, with the declared panels below", () => {
    expect(groupIntoPanels(["response_length/mean", "response_length/max"],
      [{ keys: ["response_length/clip_ratio"], title: "clip ratio", percent: true }], mag)).toEqual([
      { keys: ["response_length/mean", "response_length/max"] },
      { keys: ["response_length/clip_ratio"], title: "clip ratio", percent: true },
    ]);
    expect(groupIntoPanels(["actor/lr", "critic/lr"], [], mag)).toEqual([{ keys: ["actor/lr", "critic/lr"] }]);
  });
  it("gives a key on a very different scale a panel of its own; the first key's panel stays on top", () => {
    expect(groupIntoPanels(["actor/grad_norm", "critic/grad_norm"], [], mag)).toEqual([
      { keys: ["actor/grad_norm"] },
      { keys: ["critic/grad_norm"], title: "critic/grad_norm" },
    ]);
  });
  it("keys with no magnitude join the top panel; declared panels without keys are dropped; at most 3 panels", () => {
    expect(groupIntoPanels(["x/zero", "actor/grad_norm"], [{ keys: [], title: "none" }], mag)).toEqual([{ keys: ["x/zero", "actor/grad_norm"] }]);
    const many = { a: 1, b: 100, c: 1e4, d: 1e6 } as Record<string, number>;
    const panels = groupIntoPanels(["a", "b", "c", "d"], [{ keys: ["e"], title: "e" }], (k) => many[k] ?? 0);
    expect(panels).toHaveLength(3);
    expect(panels.flatMap((p) => p.keys).sort()).toEqual(["a", "b", "c", "d", "e"]);
    expect(panels[2]).toEqual({ keys: ["e"], title: "e" });
  });
  it("exactly 10x apart (verl's default actor and critic learning rates) is one panel", () => {
    expect(groupIntoPanels(["actor/lr", "critic/lr"], [], (k) => (k === "actor/lr" ? 1e-6 : 1e-5))).toHaveLength(1);
    expect(groupIntoPanels(["actor/lr", "critic/lr"], [], (k) => (k === "actor/lr" ? 1e-6 : 1.1e-5))).toHaveLength(2);
  });
  it("a constant panel (to rounding) gets a range around its value, not Plotly's ±1", () => {
    const ema = [1e-6, 0.9999999999999978e-6, 1.0000000000000002e-6];
    const [lo, hi] = constantRange([ema, [null]], false)!;
    expect(lo).toBeCloseTo(0.5e-6, 12);
    expect(hi).toBeCloseTo(1.5e-6, 12);
    expect(constantRange([[1e-6]], true)![0]).toBeCloseTo(-6.5, 9);
    expect(constantRange([[1, 2]], false)).toBeNull();
    expect(constantRange([[0, 0]], false)).toBeNull();
    expect(constantRange([[null]], false)).toBeNull();
  });
  it("places panels top to bottom with a gap for each title, the top one twice as tall", () => {
    expect(panelDomains(1, 194)).toEqual([[0, 1]]);
    const [top, bottom] = panelDomains(2, 200, 20);
    expect(top[1]).toBe(1);
    expect(bottom[0]).toBe(0);
    expect(top[0] - bottom[1]).toBeCloseTo(0.1, 4); // 20 px of 200
    expect(top[1] - top[0]).toBeCloseTo(2 * (bottom[1] - bottom[0]), 3);
    const three = panelDomains(3, 194);
    for (let i = 1; i < three.length; i++) expect(three[i][1]).toBeLessThan(three[i - 1][0]);
  });
});

describe("flags and overlaps", () => {
  it("a flag is the steps where it is set", () => {
    expect(flaggedSteps([1, 2, 3, 4, 5], [0, 1, 0, NaN, 1])).toEqual([2, 5]);
    expect(flaggedSteps([1, 2], [0, 0])).toEqual([]);
  });
  it("finds the lines another one would hide, pointing at the first of a group", () => {
    const lr = { steps: [1, 2, 3], values: [1e-6, 1e-6, 1e-6] };
    const other = { steps: [1, 2, 3], values: [1e-6, 1e-6, 2e-6] };
    const shorter = { steps: [1, 2], values: [1e-6, 1e-6] };
    expect(duplicateOf([lr, other, { ...lr }, shorter, { ...lr, values: [1e-6, 1e-6, 1e-6 * (1 + 1e-12)] }])).toEqual([-1, -1, 0, -1, 0]);
    expect(duplicateOf([{ steps: [1], values: [NaN] }, { steps: [1], values: [NaN] }])).toEqual([-1, 0]);
    expect(duplicateOf([{ steps: [], values: [] }, { steps: [], values: [] }])).toEqual([-1, -1]);
    expect(duplicateOf([{ steps: [1, 2], values: [1, 2] }, { steps: [1, 3], values: [1, 2] }])).toEqual([-1, -1]);
  });
  it("markers for a lone point and for a series much sparser than the chart's longest", () => {
    expect(wantsMarkers(1, 1)).toBe(true);
    expect(wantsMarkers(6, 60)).toBe(true); // a validation every 10 steps
    expect(wantsMarkers(60, 60)).toBe(false);
    expect(wantsMarkers(20, 60)).toBe(false);
  });
});

describe("points per series", () => {
  it("about one per pixel of a chart's plot width", () => {
    expect(pointsForGrid(1566)).toBe(431); // 1600 px window: 3 columns of ~515 px, ~431 px of plot each
    expect(pointsForGrid(900)).toBe(361); // 2 columns
    expect(pointsForGrid(400)).toBe(316); // 1 column
    expect(pointsForGrid(100)).toBe(100);
    expect(pointsForGrid(10_000)).toBeLessThanOrEqual(1000);
  });
});
