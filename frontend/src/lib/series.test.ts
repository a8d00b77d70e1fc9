import { describe, expect, it } from "vitest";
import { best, downsample, fromApi, groupByKey, lastFinite, mergePoints, minMaxIndices, toNumber } from "./series";

describe("series", () => {
  it("keeps one wall per step when the API left them out (wall_times=false), so live points append aligned", () => {
    const s = fromApi({ steps: [1, 2, 3], values: [1, 2, 3], wall_times: [] });
    expect(s.walls).toHaveLength(3);
    expect(s.walls.every(Number.isNaN)).toBe(true);
    mergePoints(s, [[4, 4, 104]]);
    expect(s.walls).toHaveLength(4);
    expect(s.walls[3]).toBe(104);
  });

  it("reads the API's non-finite encodings", () => {
    expect(toNumber("NaN")).toBeNaN();
    expect(toNumber(null)).toBeNaN();
    expect(toNumber("Infinity")).toBe(Infinity);
    expect(toNumber("-Infinity")).toBe(-Infinity);
    const s = fromApi({ steps: [1, 2], values: [0.5, "NaN"], wall_times: [10, 11] });
    expect(s.values[0]).toBe(0.5);
    expect(s.values[1]).toBeNaN();
  });

  it("appends live points after the downsampled history, and reports out-of-order merges", () => {
    const s = fromApi({ steps: [1, 50, 100], values: [0, 1, 2], wall_times: [1, 2, 3] });
    expect(mergePoints(s, [[101, 3, 4], [102, 4, 5]])).toBe(true);
    expect(s.steps).toEqual([1, 50, 100, 101, 102]);
    expect(mergePoints(s, [[100, 9, 6]])).toBe(false); // re-sent point: replaced in place
    expect(s.values[2]).toBe(9);
    expect(mergePoints(s, [[75, 7, 7]])).toBe(false); // a hole filled: inserted in order
    expect(s.steps).toEqual([1, 50, 75, 100, 101, 102]);
  });

  it("groups SSE points by key, in step order", () => {
    const g = groupByKey([["a", 2, 1, 0], ["b", 1, "NaN", 0], ["a", 1, 3, 0]]);
    expect(g.get("a")!.map((p) => p[0])).toEqual([1, 2]);
    expect(g.get("b")![0][1]).toBeNaN();
  });

  it("min/max buckets keep spikes and NaNs", () => {
    const values = Array.from({ length: 10_000 }, (_, i) => Math.sin(i / 100));
    values[4321] = 50; // a spike
    values[777] = NaN; // a NaN loss
    const idx = minMaxIndices(values, 200);
    expect(idx.length).toBeLessThanOrEqual(200);
    expect(idx).toContain(4321);
    expect(idx).toContain(777);
    expect([...idx].sort((a, b) => a - b)).toEqual(idx); // in order
    const s = downsample({ steps: values.map((_, i) => i), values, walls: values.map(() => 0) }, 200);
    expect(Math.max(...s.values.filter(Number.isFinite))).toBe(50);
  });

  it("leaves short series alone and finds last / best", () => {
    expect(minMaxIndices([1, 2, 3], 10)).toEqual([0, 1, 2]);
    const s = { steps: [1, 2, 3], values: [0.2, 0.9, NaN], walls: [0, 0, 0] };
    expect(lastFinite(s)).toEqual({ step: 2, value: 0.9 });
    expect(best(s, "min")).toEqual({ step: 1, value: 0.2 });
  });
});
