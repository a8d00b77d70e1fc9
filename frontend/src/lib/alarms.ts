/**
 * Health alarms: the seed's debugging checklist, automated. Every threshold lives in THRESHOLDS, here and
 * nowhere else; the Runs table badges and the Run page banner both call these functions.
 */
import type { Series } from "./series";

export const THRESHOLDS = {
  /** healthy KL to the reference lies in [klLow, klHigh] (the band shaded on the KL chart) */
  klHigh: 0.1,
  klLow: 0.01,
  /** "several steps": a KL outside the band this many consecutive steps raises the alarm */
  klSteps: 5,
  /** KL starts at 0 (policy = reference): "too low" is only judged after this many steps */
  klLowGraceSteps: 10,
  /** critic value std below this for valuesStdSteps consecutive steps: the critic predicts a constant */
  valuesStdMin: 0.01,
  valuesStdSteps: 3,
  /** score collapse: the mean of the last scoreWindow steps falls below scoreDropRatio x the best earlier
   *  window mean, and the best was at least scoreMinBest (a run that never scored cannot collapse) */
  scoreWindow: 5,
  scoreDropRatio: 0.5,
  scoreMinBest: 0.1,
  /** more than this share of responses hit max_response_length */
  clipRatioMax: 0.5,
  clipSteps: 3,
  /** degenerate answer: the same token repeated this many times in a row, or the most frequent n-gram
   *  (n = repeatNgram) covering more than repeatCoverage of a response of at least repeatMinTokens tokens */
  repeatRun: 8,
  repeatNgram: 3,
  repeatCoverage: 0.5,
  repeatMinTokens: 12,
  /** share of a step's samples that must be degenerate (empty or repetitive) to raise the alarm */
  degenerateShare: 0.25,
} as const;

/** Which key carries KL to the reference: in the reward (PPO) or as a loss (GRPO). */
export const KL_KEYS = ["actor/reward_kl_penalty", "actor/kl_loss"] as const;
export const NONFINITE_KEY = /(loss|grad_norm)(\/|$)/;
/** 1 at a step where a mini-batch's gradient was NaN/Inf and its optimizer step was skipped (max over them). */
export const SKIP_KEYS = ["actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite"] as const;

export type Severity = "error" | "warning";

export interface Alarm {
  id: string; // stable kind, e.g. "kl-high"
  severity: Severity;
  title: string;
  detail: string;
  step: number | null; // where to look: links to the samples / chart at that step
  key?: string;
}

export function klKey(keys: Iterable<string>): string | null {
  const set = new Set(keys);
  return KL_KEYS.find((k) => set.has(k)) ?? null;
}

/** The first run of >= `length` consecutive points where `bad` holds; returns its first index. */
function streak(values: readonly number[], length: number, bad: (v: number) => boolean, from = 0): number {
  let run = 0;
  for (let i = from; i < values.length; i++) {
    if (bad(values[i])) {
      run++;
      if (run >= length) return i - length + 1;
    } else run = 0;
  }
  return -1;
}

export function metricAlarms(series: Record<string, Series | undefined>): Alarm[] {
  const T = THRESHOLDS;
  const alarms: Alarm[] = [];

  const skipped = new Map<string, number[]>(); // role -> steps whose update was skipped
  for (const key of SKIP_KEYS) {
    const s = series[key];
    if (!s) continue;
    const steps = s.steps.filter((_, i) => s.values[i] > 0);
    if (!steps.length) continue;
    const role = key.split("/")[0];
    skipped.set(role, steps);
    const list = steps.length > 6 ? `${steps.slice(0, 6).join(", ")}, …` : steps.join(", ");
    alarms.push({ id: `skipped:${role}`, severity: "error", key, step: steps[steps.length - 1],
      title: `${role === "actor" ? "Actor" : "Critic"} update skipped at ${steps.length} step${steps.length === 1 ? "" : "s"}`,
      detail: `${key} = 1 at step${steps.length === 1 ? "" : "s"} ${list}: the gradient was NaN or Inf, so the optimizer step was skipped and the weights did not change (lower the learning rate, check grad clipping and the loss).` });
  }

  for (const [key, s] of Object.entries(series)) {
    if (!s || !NONFINITE_KEY.test(key)) continue;
    // a non-finite grad norm at a skipped step is the skip itself, already reported above
    if (key.endsWith("/grad_norm") && skipped.has(key.split("/")[0])) continue;
    const i = s.values.findIndex((v) => !Number.isFinite(v));
    if (i !== -1) {
      alarms.push({ id: `nonfinite:${key}`, severity: "error", key, step: s.steps[i],
        title: `${Number.isNaN(s.values[i]) ? "NaN" : "Inf"} in ${key}`,
        detail: `${key} is ${s.values[i]} at step ${s.steps[i]}: the update diverged (lower the learning rate, check grad clipping).` });
    }
  }

  const kk = klKey(Object.keys(series).filter((k) => series[k]));
  if (kk) {
    const s = series[kk]!;
    const hi = streak(s.values, T.klSteps, (v) => v > T.klHigh);
    if (hi !== -1) {
      alarms.push({ id: "kl-high", severity: "warning", key: kk, step: s.steps[hi], title: "KL above 0.1",
        detail: `${kk} > ${T.klHigh} for ${T.klSteps}+ steps from step ${s.steps[hi]}: the policy drifts from the reference (raise the KL coefficient or lower the learning rate).` });
    }
    const from = s.steps.findIndex((step) => step > T.klLowGraceSteps);
    const lo = from === -1 ? -1 : streak(s.values, T.klSteps, (v) => Number.isFinite(v) && v < T.klLow, from);
    if (lo !== -1) {
      alarms.push({ id: "kl-low", severity: "warning", key: kk, step: s.steps[lo], title: "KL below 0.01",
        detail: `${kk} < ${T.klLow} for ${T.klSteps}+ steps from step ${s.steps[lo]}: the policy barely moves (learning rate too low, or KL too strong).` });
    }
  }

  const vstd = series["critic/values/std"];
  if (vstd) {
    const i = streak(vstd.values, T.valuesStdSteps, (v) => Number.isFinite(v) && v < T.valuesStdMin);
    if (i !== -1) {
      alarms.push({ id: "values-flat", severity: "warning", key: "critic/values/std", step: vstd.steps[i],
        title: "Critic values have no spread",
        detail: `critic/values/std < ${T.valuesStdMin} from step ${vstd.steps[i]}: the critic predicts a constant (check critic lr, warmup).` });
    }
  }

  const score = series["critic/score/mean"];
  if (score) {
    const collapse = scoreCollapse(score);
    if (collapse) alarms.push(collapse);
  }

  const clip = series["response_length/clip_ratio"];
  if (clip) {
    const i = streak(clip.values, T.clipSteps, (v) => v > T.clipRatioMax);
    if (i !== -1) {
      alarms.push({ id: "clip-ratio", severity: "warning", key: "response_length/clip_ratio", step: clip.steps[i],
        title: "Responses hit the length limit",
        detail: `response_length/clip_ratio > ${T.clipRatioMax} from step ${clip.steps[i]}: most answers are cut off (raise max_response_length, or the model is rambling).` });
    }
  }
  return alarms;
}

function windowMeans(values: readonly number[], w: number): number[] {
  const out: number[] = [];
  for (let i = 0; i + w <= values.length; i++) {
    const win = values.slice(i, i + w).filter(Number.isFinite);
    out.push(win.length ? win.reduce((a, b) => a + b, 0) / win.length : NaN);
  }
  return out;
}

function scoreCollapse(score: Series): Alarm | null {
  const T = THRESHOLDS;
  const n = score.values.length;
  if (n < 2 * T.scoreWindow) return null;
  const means = windowMeans(score.values, T.scoreWindow);
  const recent = means[means.length - 1];
  let bestAt = -1;
  for (let i = 0; i <= means.length - 1 - T.scoreWindow; i++) {
    if (Number.isFinite(means[i]) && (bestAt === -1 || means[i] > means[bestAt])) bestAt = i;
  }
  if (bestAt === -1) return null;
  const bestMean = means[bestAt];
  if (bestMean < T.scoreMinBest || !(recent < bestMean * T.scoreDropRatio)) return null;
  const step = score.steps[n - T.scoreWindow];
  return { id: "score-collapse", severity: "error", key: "critic/score/mean", step, title: "Score collapsed",
    detail: `critic/score/mean fell from ${bestMean.toFixed(3)} (around step ${score.steps[bestAt]}) to ${recent.toFixed(3)}: check the samples for degenerate answers; lower the learning rate.` };
}

export interface SampleLike {
  step: number;
  response?: string | null;
  tokens?: string[] | null;
}

/** Why an answer is degenerate, or null: empty, or repetitive. */
export function degenerateReason(sample: SampleLike): string | null {
  const T = THRESHOLDS;
  const response = sample.response ?? "";
  if (response.trim() === "") return "empty answer";
  const tokens = sample.tokens && sample.tokens.length ? sample.tokens : response.split(/\s+/).filter(Boolean);
  let run = 1;
  for (let i = 1; i < tokens.length; i++) {
    run = tokens[i] === tokens[i - 1] ? run + 1 : 1;
    if (run >= T.repeatRun) return `token "${tokens[i]}" repeated ${run}+ times`;
  }
  if (tokens.length >= T.repeatMinTokens) {
    const counts = new Map<string, number>();
    const n = T.repeatNgram;
    for (let i = 0; i + n <= tokens.length; i++) {
      const gram = tokens.slice(i, i + n).join("\u0000");
      counts.set(gram, (counts.get(gram) ?? 0) + 1);
    }
    const top = Math.max(0, ...counts.values());
    if ((top * n) / tokens.length > T.repeatCoverage) return "repeats the same phrase";
  }
  return null;
}

export function sampleAlarms(samples: readonly SampleLike[]): Alarm[] {
  const byStep = new Map<number, { total: number; bad: number; reasons: Map<string, number> }>();
  for (const s of samples) {
    let e = byStep.get(s.step);
    if (!e) byStep.set(s.step, (e = { total: 0, bad: 0, reasons: new Map() }));
    e.total++;
    const reason = degenerateReason(s);
    if (reason) {
      e.bad++;
      const kind = reason.startsWith("empty") ? "empty" : "repetitive";
      e.reasons.set(kind, (e.reasons.get(kind) ?? 0) + 1);
    }
  }
  const alarms: Alarm[] = [];
  for (const [step, e] of [...byStep.entries()].sort((a, b) => b[0] - a[0])) {
    if (e.total && e.bad / e.total >= THRESHOLDS.degenerateShare) {
      const parts = [...e.reasons.entries()].map(([k, v]) => `${v} ${k}`).join(", ");
      alarms.push({ id: "degenerate", severity: "warning", step, title: "Degenerate answers",
        detail: `${e.bad} of ${e.total} answers at step ${step} are degenerate (${parts}).` });
      break; // the newest step with the problem is the one to look at
    }
  }
  return alarms;
}

/** Every alarm of a run: its metric series, and the answers of its newest step (Runs table and Run page). */
export function runAlarms(series: Record<string, Series | undefined>, newestSamples: readonly SampleLike[]): Alarm[] {
  const newest = Math.max(-Infinity, ...newestSamples.map((s) => s.step));
  return [...metricAlarms(series), ...sampleAlarms(newestSamples.filter((s) => s.step === newest))];
}
