import { describe, expect, it } from "vitest";
import type { Series } from "./series";
import { concatRuns, stepBreakdown } from "./stepBreakdown";

const s = (steps: number[], values: number[]): Series => ({ steps, values, walls: steps.map((x) => 1000 + x) });
const seg = (bd: ReturnType<typeof stepBreakdown>, phase: string) => bd!.segments.find((x) => x.phase === phase);

describe("step-time breakdown", () => {
  it("stacks the step's phases in pipeline order, the rest of the step as other, after-step work on top", () => {
    const bd = stepBreakdown(new Map([
      ["timing_s/update_actor", s([1, 2], [2, 2])],
      ["timing_s/gen", s([1, 2], [5, 7])],
      ["timing_s/gen_worker", s([1, 2], [4.9, 6.9])], // inside gen: would count twice
      ["timing_s/weight_check", s([1, 2], [0.1, 0.1])], // inside sync_weights
      ["timing_s/sync_weights", s([1, 2], [0.5, 0.5])], // a phase of its own, after update_actor
      ["timing_s/step", s([1, 2], [8, 10])],
      ["timing_s/save_checkpoint", s([2], [4])],
      ["actor/lr", s([1, 2], [1, 1])],
    ]))!;
    expect(bd.segments.map((x) => x.phase)).toEqual(["gen", "update_actor", "sync_weights", "other", "save_checkpoint"]);
    expect(bd.x).toEqual([1, 2]);
    expect(bd.width).toBe(1);
    expect(seg(bd, "other")!.seconds).toEqual([0.5, 0.5]);
    expect(seg(bd, "save_checkpoint")!.seconds).toEqual([0, 4]);
    expect(seg(bd, "save_checkpoint")!.afterStep).toBe(true);
    expect(bd.total).toEqual([8, 14]); // the step, and the step plus its checkpoint
    expect(bd.segments.reduce((a, x) => a + x.share, 0)).toBeCloseTo(1, 9);
    expect(seg(bd, "gen")!.share).toBeCloseTo(12 / 22, 9);
  });
  it("drops an 'other' under 1% and never makes it negative", () => {
    const bd = stepBreakdown(new Map([
      ["timing_s/gen", s([1], [2])], ["timing_s/reward", s([1], [1.02])], ["timing_s/step", s([1], [3])],
    ]))!;
    expect(bd.segments.map((x) => x.phase)).toEqual(["gen", "reward"]);
    expect(bd.total).toEqual([3.02]);
  });
  it("groups steps into at most maxBars bars of the mean step", () => {
    const steps = Array.from({ length: 1000 }, (_, i) => i + 1);
    const bd = stepBreakdown(new Map([
      ["timing_s/gen", s(steps, steps.map((x) => (x % 2 ? 1 : 3)))],
      ["timing_s/step", s(steps, steps.map(() => 4))],
    ]), 100)!;
    expect(bd.width).toBe(10);
    expect(bd.x).toHaveLength(100);
    expect(bd.first[0]).toBe(1);
    expect(bd.last[0]).toBe(10);
    expect(bd.x[0]).toBe(5.5);
    expect(seg(bd, "gen")!.seconds[0]).toBe(2);
    expect(seg(bd, "other")!.seconds[0]).toBe(2);
    expect(bd.last[99]).toBe(1000);
  });
  it("without timing_s/step stacks every key but the nested ones; nothing to stack is null", () => {
    const bd = stepBreakdown(new Map([["timing_s/custom", s([1], [1])], ["timing_s/gen", s([1], [2])], ["timing_s/gen_worker", s([1], [2])]]))!;
    expect(bd.segments.map((x) => x.phase)).toEqual(["gen", "custom"]);
    expect(stepBreakdown(new Map([["actor/lr", s([1], [1])]]))).toBeNull();
    expect(stepBreakdown(new Map([["timing_s/gen_worker", s([1], [1])]]))).toBeNull();
  });
  it("a non-finite time is a gap, not a NaN bar", () => {
    const bd = stepBreakdown(new Map([["timing_s/gen", s([1, 2], [NaN, 2])], ["timing_s/step", s([1, 2], [3, 3])]]))!;
    expect(seg(bd, "gen")!.seconds).toEqual([0, 2]);
    expect(bd.total).toEqual([3, 3]);
  });
  it("joins a resumed run's series after its parent's, the later run winning a shared step", () => {
    const parent = new Map([["timing_s/step", s([1, 2, 3], [5, 5, 5])]]);
    const child = new Map([["timing_s/step", s([3, 4], [6, 6])]]);
    const joined = concatRuns([parent, child]).get("timing_s/step")!;
    expect(joined.steps).toEqual([1, 2, 3, 4]);
    expect(joined.values).toEqual([5, 5, 6, 6]);
  });
});
