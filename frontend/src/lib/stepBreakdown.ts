/**
 * The step-time breakdown: verl's `timing_s/*` keys as one stacked bar per step (per group of steps once a
 * run has more steps than bars), each segment a phase of the step, so the bar is the step's time and each
 * colour its share of it.
 *
 * What is stacked: the phases the trainer times inside `timing_s/step`, in pipeline order; "other", the part of
 * the step no phase accounts for (step − their sum); then what happens after the step's timer stops
 * (validation, checkpoint). Timers nested inside a phase (a worker's own share of `gen`, the weight check inside
 * `sync_weights`, verl's `generate_sequences`) are not stacked: they would count twice; without a
 * `timing_s/step` to compute "other" from, every key but those is stacked as logged.
 */
import type { Series } from "./series";

export const STEP_PHASES = ["gen", "gen_max", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
  "sync_weights"];
export const AFTER_STEP = ["testing", "validation", "save_checkpoint", "save_checkpoint_wait"];
const NESTED = /^(gen_worker|generate_sequences|generation_timing\/.*|update_weights|reshard|weight_check)$/;
const PREFIX = "timing_s/";

export const PHASE_COLORS: Record<string, string> = {
  gen: "#4c78a8", gen_max: "#9ecae9", reward: "#eeca3b", old_log_prob: "#72b7b2", ref: "#54a24b", values: "#b279a2",
  adv: "#9d755d", update_critic: "#ff9da6", update_actor: "#e45756", sync_weights: "#d67195", other: "#bab0ac",
  testing: "#f58518", validation: "#f58518", save_checkpoint: "#6f6a66", save_checkpoint_wait: "#a5a09b",
};
const SPARE_COLORS = ["#8cd17d", "#d4a6c8", "#86bcb6", "#f1ce63", "#499894", "#fabfd2"];

export interface Segment {
  /** the phase: "gen", ..., "other" */
  phase: string;
  /** the metric key ("timing_s/gen"), null for "other" */
  key: string | null;
  /** mean seconds per step in each bar (0 where the phase has no value) */
  seconds: number[];
  /** its part of all the stacked time, 0..1 */
  share: number;
  afterStep: boolean;
  color: string;
}

export interface Breakdown {
  /** each bar's centre step */
  x: number[];
  /** each bar's first and last step */
  first: number[];
  last: number[];
  /** steps per bar */
  width: number;
  segments: Segment[];
  /** each bar's height: the sum of its segments */
  total: number[];
}

/** One series per key from several runs (a resumed run after its parent): points in step order, a later run's
 *  point replacing an earlier run's at the same step. */
export function concatRuns(runs: readonly Map<string, Series>[]): Map<string, Series> {
  const out = new Map<string, Series>();
  for (const run of runs) {
    for (const [key, s] of run) {
      const prev = out.get(key);
      if (!prev) { out.set(key, { steps: s.steps.slice(), values: s.values.slice(), walls: s.walls.slice() }); continue; }
      const byStep = new Map<number, [number, number]>();
      prev.steps.forEach((st, i) => byStep.set(st, [prev.values[i], prev.walls[i]]));
      s.steps.forEach((st, i) => byStep.set(st, [s.values[i], s.walls[i]]));
      const steps = [...byStep.keys()].sort((a, b) => a - b);
      out.set(key, { steps, values: steps.map((st) => byStep.get(st)![0]), walls: steps.map((st) => byStep.get(st)![1]) });
    }
  }
  return out;
}

/** The breakdown of a run's `timing_s/*` series (other keys are ignored); null when there is nothing to stack. */
export function stepBreakdown(series: ReadonlyMap<string, Series>, maxBars = 120): Breakdown | null {
  const timing = new Map<string, Series>();
  for (const [k, s] of series) if (k.startsWith(PREFIX) && s.steps.length) timing.set(k.slice(PREFIX.length), s);
  const step = timing.get("step");
  const phases = step
    ? [...STEP_PHASES.filter((p) => timing.has(p)), ...AFTER_STEP.filter((p) => timing.has(p))]
    : [...timing.keys()].filter((p) => p !== "step" && !NESTED.test(p)).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  if (!phases.length && !step) return null;

  let lo = Infinity;
  let hi = -Infinity;
  for (const p of [...phases, ...(step ? ["step"] : [])]) {
    const s = timing.get(p)!;
    lo = Math.min(lo, s.steps[0]);
    hi = Math.max(hi, s.steps[s.steps.length - 1]);
  }
  const width = Math.max(1, Math.ceil((hi - lo + 1) / Math.max(1, maxBars)));
  const bins = Math.floor((hi - lo) / width) + 1;
  const binOf = (st: number) => Math.floor((st - lo) / width);
  /** mean of the finite values of each bin (NaN where the bin has none) */
  const binMeans = (s: Series): number[] => {
    const sum = new Array<number>(bins).fill(0);
    const n = new Array<number>(bins).fill(0);
    s.steps.forEach((st, i) => {
      const v = s.values[i];
      if (!Number.isFinite(v)) return;
      const b = binOf(st);
      sum[b] += v;
      n[b] += 1;
    });
    return sum.map((x, b) => (n[b] ? x / n[b] : NaN));
  };
  const means = new Map(phases.map((p) => [p, binMeans(timing.get(p)!)]));
  const stepMeans = step ? binMeans(step) : null;
  const used: number[] = [];
  for (let b = 0; b < bins; b++) {
    if ((stepMeans && Number.isFinite(stepMeans[b])) || phases.some((p) => Number.isFinite(means.get(p)![b]))) used.push(b);
  }
  if (!used.length) return null;
  const value = (p: string, b: number) => { const v = means.get(p)![b]; return Number.isFinite(v) ? Math.max(0, v) : 0; };
  const inStep = phases.filter((p) => !AFTER_STEP.includes(p) || !step);
  const after = step ? phases.filter((p) => AFTER_STEP.includes(p)) : [];
  const other = stepMeans ? used.map((b) => {
    const v = stepMeans[b];
    return Number.isFinite(v) ? Math.max(0, v - inStep.reduce((sum, p) => sum + value(p, b), 0)) : 0;
  }) : null;

  let spare = 0;
  const segments: Segment[] = [];
  const add = (phase: string, key: string | null, seconds: number[], afterStep: boolean) => {
    segments.push({ phase, key, seconds, share: 0, afterStep, color: PHASE_COLORS[phase] ?? SPARE_COLORS[spare++ % SPARE_COLORS.length] });
  };
  for (const p of inStep) add(p, PREFIX + p, used.map((b) => value(p, b)), false);
  if (other) add("other", null, other, false);
  for (const p of after) add(p, PREFIX + p, used.map((b) => value(p, b)), true);
  const total = used.map((_, i) => segments.reduce((sum, s) => sum + s.seconds[i], 0));
  const grand = total.reduce((a, b) => a + b, 0);
  for (const s of segments) s.share = grand > 0 ? s.seconds.reduce((a, b) => a + b, 0) / grand : 0;
  // "other" under 1% of the time is rounding between timers, not a phase worth a colour
  const kept = segments.filter((s) => s.phase !== "other" || s.share >= 0.01);
  const keptTotal = kept.length === segments.length ? total : used.map((_, i) => kept.reduce((sum, s) => sum + s.seconds[i], 0));
  if (kept.length !== segments.length) {
    const g = keptTotal.reduce((a, b) => a + b, 0);
    for (const s of kept) s.share = g > 0 ? s.seconds.reduce((a, b) => a + b, 0) / g : 0;
  }
  const first = used.map((b) => lo + b * width);
  return {
    x: first.map((f) => f + (width - 1) / 2),
    first,
    last: first.map((f) => Math.min(hi, f + width - 1)),
    width,
    segments: kept,
    total: keptTotal,
  };
}

function rank(phase: string): number {
  const i = STEP_PHASES.indexOf(phase);
  if (i !== -1) return i;
  const j = AFTER_STEP.indexOf(phase);
  return j !== -1 ? 100 + j : 50;
}
