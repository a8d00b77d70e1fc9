import { describe, expect, it } from "vitest";
import type { Series } from "./series";
import { timeline, TIMELINE_KEYS as K } from "./timeline";

const s = (steps: number[], values: number[]): Series => ({ steps, values, walls: steps.map(() => 0) });

describe("async timeline", () => {
  it("pairs each step's rollout and training spans, sums their overlap and the trainer's idle gaps", () => {
    // step 2's batch is generated while step 1 trains (one batch ahead); step 3 waits 1 s for its batch
    const tl = timeline(new Map([
      [K.rolloutStart, s([1, 2, 3], [0, 1, 5])],
      [K.rolloutEnd, s([1, 2, 3], [1, 3, 7])],
      [K.trainStart, s([1, 2, 3], [1, 4, 7])],
      [K.trainEnd, s([1, 2, 3], [4, 6, 9])],
    ]))!;
    expect(tl.steps).toEqual([1, 3]);
    expect(tl.rollout.map((x) => [x.start, x.end])).toEqual([[0, 1], [1, 3], [5, 7]]);
    // rollout 2 (1-3) under training 1 (1-4): 2 s; rollout 3 (5-7) under training 2 (4-6): 1 s
    expect(tl.overlap).toBe(3);
    expect(tl.idle).toBe(1); // training 2 ends at 6, training 3 starts at 7
  });
  it("shows only the last steps asked for, skips a step missing a span or with an end before its start", () => {
    const steps = Array.from({ length: 50 }, (_, i) => i + 1);
    const tl = timeline(new Map([
      [K.rolloutStart, s(steps, steps.map((x) => 2 * x))],
      [K.rolloutEnd, s(steps, steps.map((x) => (x === 49 ? 2 * x - 1 : 2 * x + 1)))],
      [K.trainStart, s(steps, steps.map((x) => 2 * x + 1))],
      [K.trainEnd, s(steps.slice(0, -1), steps.slice(0, -1).map((x) => 2 * x + 2))],
    ]), 10)!;
    expect(tl.train.map((x) => x.step)).toEqual([39, 40, 41, 42, 43, 44, 45, 46, 47, 48]);
    expect(tl.overlap).toBe(0); // each batch generated after the previous step trained
    expect(tl.idle).toBe(9); // 1 s between consecutive steps, over the 10 shown
  });
  it("is null for a run without timeline metrics (the sync trainer)", () => {
    expect(timeline(new Map([["timing_s/step", s([1], [1])]]))).toBeNull();
    expect(timeline(undefined)).toBeNull();
  });
});
