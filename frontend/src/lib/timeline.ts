/**
 * The async modes' timeline (issue 29): when the rollout generated each step's batch and when the trainer trained
 * on it, from the engine's `timeline/*` metrics (seconds since the run started, engine/trainer/ASYNC.md), so the
 * overlap of generation with training — or the trainer's idle gap while it waits — is seen.
 */
import type { Series } from "./series";

export const TIMELINE_KEYS = {
  rolloutStart: "timeline/rollout_start_s",
  rolloutEnd: "timeline/rollout_end_s",
  trainStart: "timeline/train_start_s",
  trainEnd: "timeline/train_end_s",
};

export interface Span {
  step: number;
  start: number;
  end: number;
}

export interface Timeline {
  rollout: Span[];
  train: Span[];
  /** seconds in which generation and training ran at once, over the spans shown */
  overlap: number;
  /** seconds the trainer waited between one step's end and the next step's start, over the spans shown */
  idle: number;
  /** the first and last step shown */
  steps: [number, number];
}

function spans(series: ReadonlyMap<string, Series>, startKey: string, endKey: string): Map<number, Span> {
  const start = series.get(startKey);
  const end = series.get(endKey);
  const out = new Map<number, Span>();
  if (!start || !end) return out;
  const ends = new Map(end.steps.map((s, i) => [s, end.values[i]]));
  start.steps.forEach((step, i) => {
    const a = start.values[i];
    const b = ends.get(step);
    if (Number.isFinite(a) && b !== undefined && Number.isFinite(b) && b >= a) out.set(step, { step, start: a, end: b });
  });
  return out;
}

function intersection(a: Span[], b: Span[]): number {
  let total = 0;
  for (const x of a) for (const y of b) total += Math.max(0, Math.min(x.end, y.end) - Math.max(x.start, y.start));
  return total;
}

/** The last `maxSteps` steps that have both spans (null when the run logged no timeline). */
export function timeline(series: ReadonlyMap<string, Series> | undefined, maxSteps = 30): Timeline | null {
  if (!series) return null;
  const rollout = spans(series, TIMELINE_KEYS.rolloutStart, TIMELINE_KEYS.rolloutEnd);
  const train = spans(series, TIMELINE_KEYS.trainStart, TIMELINE_KEYS.trainEnd);
  const steps = [...train.keys()].filter((s) => rollout.has(s)).sort((a, b) => a - b).slice(-maxSteps);
  if (!steps.length) return null;
  const r = steps.map((s) => rollout.get(s)!);
  const t = steps.map((s) => train.get(s)!);
  let idle = 0;
  for (let i = 1; i < t.length; i++) idle += Math.max(0, t[i].start - t[i - 1].end);
  return { rollout: r, train: t, overlap: intersection(r, t), idle, steps: [steps[0], steps[steps.length - 1]] };
}
